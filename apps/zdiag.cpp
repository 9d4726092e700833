// zdiag: diagnostics of a run.
//   zdiag flight DIR   reads the flight recorder dumps of every rank
//                      (DIR/rank_R.json, written by the watchdog on a hang,
//                      on a fatal signal or on SIGUSR2; comm/watchdog.hpp)
//                      and says who stopped the job:
//   - ranks with no dump (stopped or killed before they could write one) and
//     ranks whose heartbeat stopped, as their neighbours saw it;
//   - per communicator, the first collective some rank waits in, and the
//     members that never entered it;
//   - the first sequence number whose operation, element count, dtype or root
//     differs between members (a desync), with both sides' sequences;
//   - ranks that wait for their own device (a stuck GPU or stream: the
//     'device' recorder has a device_wait in flight), which are culprits;
//   - where each rank was in the step (step, phase, pipeline instruction).
// Exit code: 0 a culprit was found, 1 nothing points at one, 2 bad input.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using nlohmann::json;

constexpr int kFound = 0, kNothing = 1, kBadInput = 2;

// "0,2-4,7"
std::string ranks_text(const std::set<int>& ranks) {
  std::string out;
  for (auto it = ranks.begin(); it != ranks.end();) {
    int lo = *it, hi = lo;
    while (++it != ranks.end() && *it == hi + 1) hi = *it;
    if (!out.empty()) out += ",";
    out += lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
  }
  return out;
}
std::string ranks_word(const std::set<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + ranks_text(ranks);
}

// What must agree between the members for the same sequence number.
std::string signature(const json& e) {
  std::string s = e.value("op", "?") + " " + std::to_string(e.value("count", int64_t{-1})) + " x " +
                  e.value("dtype", "?");
  if (e.contains("root")) s += " root " + std::to_string(e["root"].get<int>());
  return s;
}

std::string where(const json& e) {
  std::string s = "step " + std::to_string(e.value("step", int64_t{0})) + ", " + e.value("phase", "?");
  const std::string instr = e.value("instr", "");
  if (!instr.empty()) s += ", " + instr;
  return s;
}

struct RankDump {
  int rank = -1;
  json j;
};

// One communicator as the members' dumps show it.
struct Comm {
  std::string name, backend;
  std::vector<int> members;                        // world ranks
  std::map<int, std::map<int64_t, json>> by_rank;  // world rank -> seq -> entry (collectives)
  std::map<int, int64_t> next_seq;                 // world rank -> collectives issued
  std::map<int, std::vector<json>> p2p_pending;    // world rank -> sends/recvs not completed
  // world rank -> (op, peer's group rank) -> transfers posted (the highest p2p_seq seen + 1)
  std::map<int, std::map<std::pair<std::string, int>, int64_t>> p2p_posted;
};

// The fields the analysis reads, with their JSON kinds: a dump whose field
// has another kind is named with the field's path before anything is
// printed, rather than failing halfway through the report.
enum class Kind { integer, number, string, ints, context, comms, entries };

std::string kind_name(Kind k) {
  switch (k) {
    case Kind::integer: return "an integer";
    case Kind::number: return "a number";
    case Kind::string: return "a string";
    case Kind::ints: return "an array of integers";
    case Kind::context: return "an object";
    case Kind::comms:
    case Kind::entries: return "an array of objects";
  }
  return "?";
}

using FieldKinds = std::vector<std::pair<const char*, Kind>>;
const FieldKinds kTop = {{"rank", Kind::integer},       {"world_size", Kind::integer}, {"reason", Kind::string},
                         {"time", Kind::number},        {"suspects", Kind::ints},      {"context", Kind::context},
                         {"communicators", Kind::comms}};
const FieldKinds kContext = {{"step", Kind::integer}, {"phase", Kind::string}, {"instr", Kind::string}};
const FieldKinds kComm = {{"name", Kind::string},       {"backend", Kind::string},   {"ranks", Kind::ints},
                          {"next_seq", Kind::integer},  {"entries", Kind::entries},  {"in_flight", Kind::entries}};
const FieldKinds kEntry = {{"seq", Kind::integer},    {"op", Kind::string},        {"count", Kind::integer},
                           {"dtype", Kind::string},   {"root", Kind::integer},     {"state", Kind::string},
                           {"peer", Kind::integer},   {"p2p_seq", Kind::integer},  {"step", Kind::integer},
                           {"phase", Kind::string},   {"instr", Kind::string},     {"what", Kind::string},
                           {"t_queued", Kind::number}};

// "" if every field of `fields` present in object `o` has its kind, else
// what is wrong, with the field's path.
std::string check_fields(const json& o, const FieldKinds& fields, const std::string& at) {
  if (!o.is_object()) return (at.empty() ? "the dump" : at) + " is not an object";
  for (const auto& [key, kind] : fields) {
    const auto it = o.find(key);
    if (it == o.end() || it->is_null()) continue;
    const json& v = *it;
    const std::string path = at.empty() ? key : at + "." + key;
    bool ok = false;
    switch (kind) {
      case Kind::integer: ok = v.is_number_integer(); break;
      case Kind::number: ok = v.is_number(); break;
      case Kind::string: ok = v.is_string(); break;
      case Kind::ints:
        ok = v.is_array() && std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number_integer(); });
        break;
      case Kind::context: {
        if (!v.is_object()) break;
        if (std::string e = check_fields(v, kContext, path); !e.empty()) return e;
        ok = true;
        break;
      }
      case Kind::comms:
      case Kind::entries: {
        if (!v.is_array()) break;
        for (size_t i = 0; i < v.size(); ++i)
          if (std::string e = check_fields(v[i], kind == Kind::comms ? kComm : kEntry,
                                           path + "[" + std::to_string(i) + "]");
              !e.empty())
            return e;
        ok = true;
        break;
      }
    }
    if (!ok) return path + ": expected " + kind_name(kind) + ", found " + v.dump().substr(0, 40);
  }
  return "";
}

int flight(const std::string& dir) {
  std::vector<RankDump> dumps;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    std::fprintf(stderr, "zdiag flight: '%s' is not a directory\n", dir.c_str());
    return kBadInput;
  }
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    const std::string name = f.path().filename().string();
    if (name.rfind("rank_", 0) != 0 || f.path().extension() != ".json") continue;
    std::ifstream in(f.path());
    RankDump d;
    try {
      in >> d.j;
      if (std::string e = check_fields(d.j, kTop, ""); !e.empty()) throw std::runtime_error(e);
      d.rank = d.j.at("rank").get<int>();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "zdiag flight: %s: not a flight recorder dump (%s)\n", f.path().c_str(), e.what());
      return kBadInput;
    }
    dumps.push_back(std::move(d));
  }
  if (dumps.empty()) {
    std::fprintf(stderr, "zdiag flight: no rank_R.json under '%s'\n", dir.c_str());
    return kBadInput;
  }
  std::sort(dumps.begin(), dumps.end(), [](const RankDump& a, const RankDump& b) { return a.rank < b.rank; });
  int world = 0;
  for (const RankDump& d : dumps) world = std::max({world, d.j.value("world_size", 0), d.rank + 1});

  std::set<int> culprits, present, suspects;
  for (const RankDump& d : dumps) present.insert(d.rank);
  std::set<int> missing;
  for (int r = 0; r < world; ++r)
    if (!present.count(r)) missing.insert(r);

  // Dumps on request (SIGUSR2) of a run that goes on were written at slightly
  // different moments: a rank not yet in the collective another waits in is
  // only behind, and the missing dumps may still come. Only a desync names a
  // culprit then.
  bool on_request = true;
  for (const RankDump& d : dumps)
    if (d.j.value("reason", "").rfind("SIGUSR2", 0) != 0) on_request = false;
  if (on_request)
    std::cout << "dumps on request (SIGUSR2): the ranks were not stopped together, so a rank behind the others "
                 "is no culprit\n";

  // Why the job ended: the dumps that are not answers to another rank's end.
  for (const RankDump& d : dumps) {
    const std::string reason = d.j.value("reason", "");
    if (reason.rfind("ended by ", 0) == 0) continue;
    std::cout << "rank " << d.rank << ": " << reason << "\n";
    for (const json& s : d.j.value("suspects", json::array())) suspects.insert(s.get<int>());
  }
  if (!missing.empty()) {
    std::cout << ranks_word(missing) << " left no dump (stopped or killed before it could write one)\n";
    if (!on_request) culprits.insert(missing.begin(), missing.end());
  }
  if (!suspects.empty()) {
    std::cout << "heartbeat stopped: " << ranks_word(suspects) << " (as its ring neighbours saw it)\n";
    culprits.insert(suspects.begin(), suspects.end());
  }

  // The communicators, keyed by name and members; `busy`: the ranks waiting
  // in some operation (on any communicator), which are victims rather than
  // culprits when they never reach another one.
  std::map<std::string, Comm> comms;
  std::set<int> busy;
  std::set<int> stuck_devices;
  for (const RankDump& d : dumps) {
    for (const json& c : d.j.value("communicators", json::array())) {
      if (c.value("backend", "") == "device") {
        // The rank's waits for its own device ([Note: watched host waits]).
        for (const json& e : c.value("in_flight", json::array())) {
          if (e.value("state", "") == "completed") continue;
          const double age = d.j.value("time", 0.0) - e.value("t_queued", 0.0);
          std::cout << "rank " << d.rank << " waits for its device (" << e.value("what", "?") << ") since "
                    << static_cast<int64_t>(age + 0.5) << " s before its dump (" << where(e) << ")\n";
          stuck_devices.insert(d.rank);
        }
        continue;
      }
      std::vector<int> members = c.value("ranks", std::vector<int>{});
      std::string key = c.value("name", "?") + "/" + c.value("backend", "?") + "[";
      for (int m : members) key += std::to_string(m) + ",";
      Comm& cm = comms[key + "]"];
      cm.name = c.value("name", "?");
      cm.backend = c.value("backend", "?");
      cm.members = members;
      cm.next_seq[d.rank] = c.value("next_seq", int64_t{0});
      auto& seqs = cm.by_rank[d.rank];
      if (!c.value("in_flight", json::array()).empty()) busy.insert(d.rank);
      for (const char* part : {"entries", "in_flight"})
        for (const json& e : c.value(part, json::array())) {
          if (e.contains("seq")) {
            seqs[e["seq"].get<int64_t>()] = e;
            continue;
          }
          int64_t& posted = cm.p2p_posted[d.rank][{e.value("op", ""), e.value("peer", -1)}];
          posted = std::max(posted, e.value("p2p_seq", int64_t{-1}) + 1);
          if (e.value("state", "") != "completed" && std::string(part) == "in_flight") {
            cm.p2p_pending[d.rank].push_back(e);
          }
        }
    }
  }

  for (auto& [key, cm] : comms) {
    std::set<int> member_set(cm.members.begin(), cm.members.end());
    const std::string label = "'" + cm.name + "' (" + cm.backend + ", " + ranks_word(member_set) + ")";
    if (cm.members.size() < 2) {
      // A communicator of one rank waits for nobody: a collective on it that
      // never completes waits for that rank's own device (NCCL runs it on
      // the GPU, behind the rank's earlier work).
      if (cm.members.size() == 1 && !on_request)
        for (const auto& [s, e] : cm.by_rank[cm.members[0]])
          if (e.value("state", "") != "completed") {
            std::cout << "on " << label << ": collective #" << s << " " << signature(e) << " is "
                      << e.value("state", "?") << " and never completed (" << where(e) << "); rank "
                      << cm.members[0] << " is its only member, so its own device never ran it\n";
            culprits.insert(cm.members[0]);
            break;
          }
      continue;
    }
    // Desync: the first sequence number two members disagree on.
    std::set<int64_t> all_seqs;
    for (const auto& [r, seqs] : cm.by_rank)
      for (const auto& [s, e] : seqs) all_seqs.insert(s);
    for (int64_t s : all_seqs) {
      std::map<std::string, std::set<int>> sides;
      std::map<std::string, json> example;
      for (const auto& [r, seqs] : cm.by_rank) {
        auto it = seqs.find(s);
        if (it == seqs.end()) continue;
        const std::string sig = signature(it->second);
        sides[sig].insert(r);
        example.emplace(sig, it->second);
      }
      if (sides.size() < 2) continue;
      std::cout << "desync on " << label << " at collective #" << s << ":\n";
      // The minority is the culprit (ties: every side is named).
      size_t smallest = SIZE_MAX;
      for (const auto& [sig, rs] : sides) smallest = std::min(smallest, rs.size());
      for (const auto& [sig, rs] : sides) {
        std::cout << "  " << ranks_word(rs) << ": " << sig << " (" << where(example[sig]) << ")\n";
        if (rs.size() == smallest) culprits.insert(rs.begin(), rs.end());
      }
      // The two (or more) sequences around it, one rank of each side.
      for (const auto& [sig, rs] : sides) {
        const int r = *rs.begin();
        std::cout << "  rank " << r << " from #" << std::max<int64_t>(0, s - 2) << ":";
        const auto& seqs = cm.by_rank[r];
        for (auto it = seqs.lower_bound(s - 2); it != seqs.end() && it->first <= s + 2; ++it)
          std::cout << "  #" << it->first << " " << signature(it->second);
        std::cout << "\n";
      }
      break;
    }
    // Stuck: the latest collective some member waits in (a member waits in
    // its first collective not completed); the members that never entered it
    // are what it waits for. A rank stopped inside an earlier collective
    // still shows that one as not completed, though its peers finished it.
    int64_t stuck = -1;
    for (const auto& [r, seqs] : cm.by_rank)
      for (const auto& [s, e] : seqs)
        if (e.value("state", "") != "completed") {
          stuck = std::max(stuck, s);
          break;
        }
    if (stuck >= 0) {
      std::set<int> waiting, never;
      json example;
      for (const auto& [r, seqs] : cm.by_rank) {
        auto it = seqs.find(stuck);
        if (it != seqs.end()) {
          if (it->second.value("state", "") != "completed") waiting.insert(r);
          if (example.is_null()) example = it->second;
        } else if (cm.next_seq[r] <= stuck) {
          never.insert(r);
        }
      }
      std::cout << "on " << label << ": collective #" << stuck << " " << signature(example) << " waited in by "
                << ranks_word(waiting) << " (" << where(example) << ")\n";
      // On a device communicator (NCCL) an operation is 'started' when the
      // rank's GPU reached it and 'queued' before: a member still queued
      // while others started has a device stuck on earlier work.
      std::set<int> queued, started;
      for (int r : waiting) {
        const std::string st = cm.by_rank[r].at(stuck).value("state", "");
        (st == "queued" ? queued : started).insert(r);
      }
      if (!queued.empty() && !started.empty()) {
        std::cout << "  " << ranks_word(started) << (started.size() == 1 ? " is" : " are")
                  << " inside it; the device of " << ranks_word(queued) << " never reached it (queued behind "
                  << "earlier work on the GPU)\n";
        if (!on_request) culprits.insert(queued.begin(), queued.end());
      }
      // A member that never entered it is the culprit unless it is itself
      // waiting in an earlier collective or any other operation (then it
      // waits on someone else, often the stopped rank).
      for (int r : never) {
        const auto& seqs = cm.by_rank[r];
        std::cout << "  rank " << r << " never entered it";
        bool waits = false;
        if (!seqs.empty()) {
          const json& last = seqs.rbegin()->second;
          waits = last.value("state", "") != "completed";
          std::cout << (waits ? "; it still waits in #" : "; its last was #") << seqs.rbegin()->first << " "
                    << signature(last) << (waits ? "" : ", completed") << " (" << where(last) << ")";
        }
        std::cout << "\n";
        if (!waits && !busy.count(r) && !on_request) culprits.insert(r);
      }
      std::set<int> absent;
      for (int m : cm.members)
        if (!cm.by_rank.count(m)) absent.insert(m);
      if (!absent.empty()) std::cout << "  " << ranks_word(absent) << ": no dump\n";
    }
    // Point-to-point transfers in flight: the k-th receive from a peer
    // matches the peer's k-th send to this rank. A peer whose dump shows
    // fewer sends (receives) never posted the match.
    for (const auto& [r, ops] : cm.p2p_pending)
      for (const json& e : ops) {
        const bool is_send = e.value("op", "") == "send";
        const int peer_group = e.value("peer", 0);
        const int peer = cm.members.at(static_cast<size_t>(peer_group));
        const int64_t k = e.value("p2p_seq", int64_t{-1});
        std::cout << "on " << label << ": rank " << r << " waits in " << (is_send ? "send #" : "recv #") << k
                  << (is_send ? " to" : " from") << " rank " << peer << " (" << where(e) << ")";
        if (cm.p2p_posted.count(peer)) {
          const auto& posted = cm.p2p_posted[peer];
          const int me_group = static_cast<int>(
              std::find(cm.members.begin(), cm.members.end(), r) - cm.members.begin());
          auto it = posted.find({is_send ? "recv" : "send", me_group});
          const int64_t n = it == posted.end() ? 0 : it->second;
          if (n <= k) {
            std::cout << "; rank " << peer << " never posted the matching " << (is_send ? "recv" : "send");
            if (!busy.count(peer) && !on_request) culprits.insert(peer);
          }
        }
        std::cout << "\n";
      }
  }

  // A rank stuck on its device is the culprit (the ranks waiting for it in
  // collectives are victims); on request, only behind.
  if (!on_request) culprits.insert(stuck_devices.begin(), stuck_devices.end());

  // Where each rank was, ranks grouped by place.
  std::map<std::string, std::set<int>> places;
  for (const RankDump& d : dumps) {
    const json c = d.j.value("context", json::object());
    std::string place = "step " + std::to_string(c.value("step", int64_t{0})) + ", " + c.value("phase", "?");
    if (!c.value("instr", "").empty()) place += ", " + c.value("instr", "");
    places[place].insert(d.rank);
  }
  for (const auto& [place, rs] : places)
    std::cout << ranks_word(rs) << (rs.size() == 1 ? " was" : " were") << " at " << place << "\n";

  if (culprits.empty()) {
    std::cout << "no culprit found: every rank dumped, no heartbeat stopped, the collectives agree, and no rank "
                 "waits for one that another rank never entered\n";
    return kNothing;
  }
  std::cout << "culprit: " << ranks_word(culprits) << "\n";
  return kFound;
}

void usage() {
  std::cout << "usage: zdiag flight DIR\n\n"
               "Reads the flight recorder dumps of every rank (DIR/rank_R.json; DIR is LOG_DIR/flight)\n"
               "and prints which ranks never entered a collective, which disagree on one (a desync),\n"
               "and where each rank was. Exit code: 0 a culprit was found, 1 none, 2 bad input.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
    usage();
    return 0;
  }
  if (argc != 3 || std::string(argv[1]) != "flight") {
    std::fprintf(stderr, "zdiag: %s\n",
                 argc < 2                             ? "no command given"
                 : std::string(argv[1]) != "flight"   ? ("unknown command '" + std::string(argv[1]) + "'").c_str()
                 : argc < 3                           ? "flight: the dump directory (LOG_DIR/flight) is missing"
                                                      : "flight: one directory only");
    usage();
    return kBadInput;
  }
  try {
    return flight(argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zdiag flight: %s\n", e.what());
    return kBadInput;
  }
}
