#include "core/helper_pool.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

namespace distckpt {
namespace {

// One RunWithHelpers call: its helper calls yet to start, and those running.
struct Job {
  const std::function<void(size_t)>* work = nullptr;
  size_t next_call = 1;
  size_t last_call = 0;
  int running = 0;
  bool closed = false;  // work(0) returned: start no more calls
  std::condition_variable done;
};

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 0; i < threads; ++i) std::thread([this] { Loop(); }).detach();
  }

  void Run(int helpers, const std::function<void(size_t)>& work) {
    auto job = std::make_shared<Job>();
    job->work = &work;
    job->last_call = static_cast<size_t>(helpers);
    {
      std::lock_guard lock(mu_);
      for (int i = 0; i < helpers; ++i) queue_.push_back(job);
    }
    if (helpers == 1) {
      ready_.notify_one();
    } else {
      ready_.notify_all();
    }
    struct Close {  // also when work(0) throws
      Pool* pool;
      Job* job;
      ~Close() {
        std::unique_lock lock(pool->mu_);
        job->closed = true;
        job->done.wait(lock, [&] { return job->running == 0; });
      }
    } close{this, job.get()};
    work(0);
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      ready_.wait(lock, [&] { return !queue_.empty(); });
      std::shared_ptr<Job> job = std::move(queue_.front());
      queue_.pop_front();
      if (job->closed || job->next_call > job->last_call) continue;
      const size_t call = job->next_call++;
      ++job->running;
      lock.unlock();
      (*job->work)(call);
      lock.lock();
      if (--job->running == 0) job->done.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<Job>> queue_;  // one entry per helper call offered
};

Pool& ThePool() {
  // Never destroyed: its threads may still wait on it while the process exits.
  static Pool* pool = new Pool(HelperPoolSize());
  return *pool;
}

}  // namespace

int HardwareThreads() {
  static const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return threads;
}

int HelperPoolSize() { return std::max(2, HardwareThreads()) - 1; }

void RunWithHelpers(int helpers, const std::function<void(size_t call)>& work) {
  helpers = std::clamp(helpers, 0, HelperPoolSize());
  if (helpers == 0) {
    work(0);
    return;
  }
  ThePool().Run(helpers, work);
}

}  // namespace distckpt
