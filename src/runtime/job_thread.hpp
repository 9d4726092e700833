// JobThread: one thread for the life of its owner that runs the jobs handed
// to it in order, for host work beside the main thread (the offloaded
// optimizer's update, the host adds of landed gradient pieces). Its OpenMP
// team is made once and kept, instead of a new thread and team per job.
// Jobs must not throw: each keeps its own error for its owner to report.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace zt {

class JobThread {
 public:
  JobThread() : thread_([this] { loop(); }) {}
  ~JobThread() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();  // after the jobs queued so far
  }
  JobThread(const JobThread&) = delete;
  JobThread& operator=(const JobThread&) = delete;

  void start(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
  }
  // Until every job handed so far has run.
  void wait() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !running_ && jobs_.empty(); });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopped, nothing left
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      running_ = true;
      lk.unlock();
      job();
      lk.lock();
      running_ = false;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool running_ = false, stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace zt
