#include "io/tokenize_text.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "core/error.hpp"

namespace zt {

DocMode parse_doc_mode(const std::string& name) {
  if (name == "file") return DocMode::kFile;
  if (name == "line") return DocMode::kLine;
  if (name == "blank-line") return DocMode::kBlankLine;
  ZT_USER_ERROR("unknown document mode '", name, "' (expected file, line or blank-line)");
}

std::vector<std::string_view> split_documents(std::string_view text, DocMode mode) {
  std::vector<std::string_view> docs;
  if (mode == DocMode::kFile) {
    if (!text.empty()) docs.push_back(text);
    return docs;
  }
  // Walk the lines; a document is a run of lines (kLine: one line), without
  // its final "\n". kBlankLine: a line of only spaces, tabs and "\r" ends one.
  size_t doc_begin = std::string_view::npos, doc_end = 0, pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(pos, nl - pos);
    const bool blank = mode == DocMode::kLine ? line.empty() : line.find_first_not_of(" \t\r") == std::string_view::npos;
    if (!blank) {
      if (doc_begin == std::string_view::npos) doc_begin = pos;
      doc_end = nl;
    }
    if ((blank || mode == DocMode::kLine) && doc_begin != std::string_view::npos) {
      docs.push_back(text.substr(doc_begin, doc_end - doc_begin));
      doc_begin = std::string_view::npos;
    }
    pos = nl + 1;
  }
  if (doc_begin != std::string_view::npos) docs.push_back(text.substr(doc_begin, doc_end - doc_begin));
  return docs;
}

namespace {

bool safe_cut(std::string_view doc, size_t i) {
  // Cut before doc[i]: doc[i-1] == '\n', doc[i-2] printable ASCII, doc[i] ASCII letter.
  if (i < 2 || i >= doc.size() || doc[i - 1] != '\n') return false;
  const auto before = static_cast<unsigned char>(doc[i - 2]);
  const auto after = static_cast<unsigned char>(doc[i]);
  return before >= 0x21 && before <= 0x7E && ((after | 0x20) >= 'a' && (after | 0x20) <= 'z');
}

}  // namespace

std::vector<std::string_view> split_long_document(std::string_view doc, int64_t item_bytes) {
  std::vector<std::string_view> out;
  const auto step = static_cast<size_t>(std::max<int64_t>(item_bytes, 1));
  size_t start = 0;
  while (doc.size() - start > step) {
    size_t cut = std::string_view::npos;
    for (size_t nl = doc.find('\n', start + step - 1); nl != std::string_view::npos; nl = doc.find('\n', nl + 1)) {
      if (safe_cut(doc, nl + 1)) {
        cut = nl + 1;
        break;
      }
    }
    if (cut == std::string_view::npos) break;
    out.push_back(doc.substr(start, cut - start));
    start = cut;
  }
  out.push_back(doc.substr(start));
  return out;
}

std::vector<uint32_t> tokenize_texts(const Tokenizer& tok, const std::vector<std::string_view>& texts,
                                     const TokenizeOptions& opts) {
  // Work items: runs of pieces; a piece is a document or a part of one.
  struct Piece {
    std::string_view text;
    bool first, last;  // first / last part of its document
  };
  std::vector<std::vector<Piece>> items(1);
  int64_t item_size = 0, total = 0;
  for (std::string_view text : texts) {
    for (std::string_view doc : split_documents(text, opts.docs)) {
      std::vector<std::string_view> parts{doc};
      if (tok.splits_at_lines() && static_cast<int64_t>(doc.size()) > opts.item_bytes)
        parts = split_long_document(doc, opts.item_bytes);
      for (size_t p = 0; p < parts.size(); ++p) {
        if (item_size >= opts.item_bytes) {
          items.emplace_back();
          item_size = 0;
        }
        items.back().push_back({parts[p], p == 0, p + 1 == parts.size()});
        item_size += static_cast<int64_t>(parts[p].size());
        total += static_cast<int64_t>(parts[p].size());
      }
    }
  }

  std::vector<std::vector<uint32_t>> results(items.size());
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (size_t i = next++; i < items.size() && !failed; i = next++) {
      try {
        std::vector<uint32_t>& out = results[i];
        for (const Piece& p : items[i]) {
          if (p.first && opts.bos) out.push_back(*opts.bos);
          tok.encode(p.text, out);
          if (p.last && opts.eos) out.push_back(*opts.eos);
          done += static_cast<int64_t>(p.text.size());
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  const int n_threads = std::max(1, std::min<int>(opts.threads, static_cast<int>(items.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n_threads; ++t) pool.emplace_back(worker);
  // The progress reporter runs beside the workers, on its own thread.
  std::mutex m;
  std::condition_variable cv;
  bool finished = false;
  std::thread reporter;
  if (opts.progress) {
    reporter = std::thread([&] {
      std::unique_lock<std::mutex> lock(m);
      while (!cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return finished; }))
        opts.progress(done.load(), total);
    });
  }
  worker();
  for (auto& t : pool) t.join();
  if (reporter.joinable()) {
    {
      std::lock_guard<std::mutex> lock(m);
      finished = true;
    }
    cv.notify_all();
    reporter.join();
    opts.progress(done.load(), total);
  }
  if (error) std::rethrow_exception(error);

  size_t n = 0;
  for (const auto& r : results) n += r.size();
  std::vector<uint32_t> ids;
  ids.reserve(n);
  for (auto& r : results) {
    ids.insert(ids.end(), r.begin(), r.end());
    std::vector<uint32_t>().swap(r);
  }
  return ids;
}

}  // namespace zt
