#include "runtime/host_wait.hpp"

#include <atomic>
#include <utility>

namespace zt::host_wait {
namespace {
std::atomic<Watcher*> g_watcher{nullptr};
}  // namespace

void install(Watcher* w) { g_watcher.store(w); }

Scope::Scope(const char* what, std::function<bool()> done) : w_(g_watcher.load()) {
  if (w_ != nullptr) id_ = w_->begin(what, std::move(done));
}

Scope::~Scope() {
  if (w_ != nullptr) w_->end(id_);
}

}  // namespace zt::host_wait
