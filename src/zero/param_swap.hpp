// ParamSwap: the working (16-bit) parameter shards of one rank in a swap file
// on NVMe, for ZeRO-3 with offload_param.device "nvme" (ZeRO-Infinity).
//
// [Note: parameter offload to NVMe] The rank's owned shard of every unit it
// holds has a region of one file under offload_param.nvme_path, padded to
// the directory's direct-I/O alignment ([Note: aio alignment]); the file is
// ztrain-<run id>-param-rank<R>-params.swp (its own SwapDir, with its own
// lock, so it may share the directory with the optimizer's files: [Note:
// stale swap files]). The first units, in unit order, whose shards add up to
// at most max_in_cpu elements stay in host memory instead ("resident": the
// host copy of offload_param "cpu", pinned per pin_memory) and are never
// read from the file.
//
// Reads: buffer_count pinned buffers, each as large as the largest shard in
// the file (at most buffer_size elements; a larger shard is refused by name).
// ZeroEngine asks for a unit's shard before its gather (shard(): the read is
// issued if it is not in flight yet, and waited for), uploads it from the
// buffer to its device pool, and hands the buffer back with the upload's
// ticket (used()). The buffer then keeps the unit ("kept"): its next use
// takes it without a read unless the buffer was taken first. A buffer is
// taken free, else the least recently used of those kept or written (a
// kept unit is read again at its next use), once its last upload is done.
// prefetch() issues a read into such a buffer without waiting, so the
// engine's prefetch walks ahead of use in the direction of travel and the
// reads run while earlier units compute; it holds a kept unit for its use.
// A step's walk turns at each end (forward up, backward down, the next
// forward up again), so the units used last are used again first: with B
// buffers about B units a turn are not read again. A unit kept gathered
// (stage 3's reuse distance) is not read either.
//
// Writes: the offloaded optimizer hands each shard's new parameters to put()
// (ParamSink) in pieces; they are copied into a buffer (the read buffers,
// free during the optimizer step), and once a shard is complete its region
// is written while the optimizer goes on with the next shards. The writes
// are not waited for at the end of the step: they go on while the next
// step's first units are read (the disk serves reads and writes at once
// faster than one after the other). The buffer keeps the unit as after a
// use, and the unit's next use takes it from there even while the write
// runs (the upload and the write both read it); the buffer is taken for
// another unit only once the write is over. A put waits for a read of the
// old parameters still in flight, and overwrites a kept unit once its
// upload is done; a unit read while its put is incomplete is an error. A
// write's error comes from the wait before its buffer is taken for another
// unit, so no read of the file can see a failed write; the writes still in
// flight at the end are waited for by the engine's destruction.
//
// Errors: the checks of the directory are SwapDir's (UserError naming
// offload_param.nvme_path: a device, a file, no parent, not writable, too
// little free space); an I/O error throws from the wait, naming the file,
// the operation and the offset. A clean destruction removes the file;
// remove_param_swap_files_now() unlinks the files of every live ParamSwap of
// the process (a rank about to abort the job).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "runtime/aio/aio.hpp"
#include "runtime/device.hpp"
#include "runtime/transfer.hpp"
#include "zero/owned_shard.hpp"

namespace zt {

struct ParamSwapOptions {
  std::string nvme_path;
  std::string run_id = "p0";  // the run's id (optim's nvme_run_id()); the file's is "<run_id>-param"
  int rank = 0;
  int buffer_count = 5;             // pinned read buffers
  int64_t buffer_size = 100000000;  // elements per read buffer at most
  int64_t max_in_cpu = 1000000000;  // elements kept resident in host memory
  bool pin_memory = false;          // the resident shards page-locked
  AioOptions aio;
  AioBackend backend = AioBackend::automatic;
};

// Bytes moved to and from the file since the last take_stats(), and the
// time the host waited for them (what the prefetch did not hide).
struct ParamSwapStats {
  double read_bytes = 0;
  double write_bytes = 0;
  double read_wait_s = 0;
  double write_wait_s = 0;
  int64_t reads = 0;
  int64_t writes = 0;
};

class ParamSwap final : public ParamSink {
 public:
  // shard_elems[u]: elements of the rank's owned shard of unit u, -1 for a
  // unit this rank does not hold; names[u] for messages.
  ParamSwap(const ParamSwapOptions& opts, Device& dev, TransferQueue& copies, DType dtype,
            const std::vector<int64_t>& shard_elems, const std::vector<std::string>& names);
  ~ParamSwap();
  ParamSwap(const ParamSwap&) = delete;
  ParamSwap& operator=(const ParamSwap&) = delete;

  bool resident(int u) const { return units_[static_cast<size_t>(u)].resident; }
  // Host memory of a resident unit's shard.
  void* resident_shard(int u) const;

  // Issues the read of u's shard into a free buffer; false when none is
  // free (nothing waits). True also when u is resident or already read.
  bool prefetch(int u);
  // u's shard in a pinned buffer (reading it now if no read is in flight).
  const void* shard(int u);
  // The upload from u's buffer is `upload`: the buffer keeps u, and is taken
  // for another unit only once that copy is done.
  void used(int u, TransferTicket upload);

  // ParamSink: a piece of the new parameters of a unit.
  void put(const OwnedShard& sh, size_t byte_offset, const void* src, size_t bytes) override;

  int64_t file_bytes() const { return file_bytes_; }
  int64_t resident_elements() const { return resident_elems_; }
  ParamSwapStats take_stats();

  // Unlinks the files of every live ParamSwap of this process (see the Note).
  static void remove_files_now() noexcept;

 private:
  struct UnitSlot {
    int64_t elems = -1;  // -1: not held
    bool resident = false;
    int64_t offset = 0;  // in the file, or elements into resident_ when resident
    int64_t bytes = 0;   // shard bytes (dtype)
    int64_t region = 0;  // bytes in the file (aligned)
    int buffer = -1;     // the buffer reading, holding or writing it
    bool written = false;
  };
  // kept: holds the unit's current parameters, no read in flight (a write
  // may be: write_pending).
  enum class State { free, reading, loaded, kept, staging };
  struct Buf {
    Buffer raw;
    char* data = nullptr;
    State state = State::free;
    int unit = -1;
    AioHandle io;               // the read (reading) or the write (write_pending) in flight
    bool write_pending = false;  // its unit's new parameters being written from it
    TransferTicket upload;  // the last upload from it
    int64_t filled = 0;     // staging: bytes put
    uint64_t seq = 0;       // when its read was issued (the later, the further ahead), or its last use or put
  };
  int take_buffer(bool may_wait);
  void issue_read(int u, int b);
  void wait_read(Buf& b);   // reading -> loaded
  void wait_write(Buf& b);  // the pending write, if any
  void release(Buf& b);

  DType dtype_;
  TransferQueue& copies_;
  std::vector<UnitSlot> units_;
  std::vector<std::string> names_;
  Buffer resident_;
  int64_t resident_elems_ = 0;
  int64_t file_bytes_ = 0;
  std::vector<Buf> bufs_;
  uint64_t seq_ = 0;
  ParamSwapStats stats_;
  std::string key_;
  // Destroyed in this order: the engine (waits for its transfers), then the
  // directory (removes the file).
  std::unique_ptr<SwapDir> dir_;
  SwapFile* file_ = nullptr;
  std::unique_ptr<AioEngine> aio_;
};

}  // namespace zt
