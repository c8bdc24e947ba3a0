// Completion state of a transfer (IoRequest's shared state).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>

#include "cudakit/gds.hpp"

namespace cudakit::gds {

struct IoRequest::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::size_t bytes = 0;
  std::exception_ptr error;

  void finish(std::size_t moved, std::exception_ptr e) {
    {
      std::lock_guard lock(mu);
      bytes = moved;
      error = std::move(e);
      done = true;
    }
    cv.notify_all();
  }
  // Blocks until finish(); never throws (used by stream gates on driver threads).
  void wait_quietly() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};

}  // namespace cudakit::gds
