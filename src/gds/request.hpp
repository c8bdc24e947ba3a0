// Completion state of a transfer (IoRequest's shared state).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>

#include "cudakit/gds.hpp"
#include "gds/gate.hpp"

namespace cudakit::gds {

struct IoRequest::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::size_t bytes = 0;
  std::exception_ptr error;
  io::GateWord gate;  // the caller's stream waits for it (stream-ordered transfers)

  void finish(std::size_t moved, std::exception_ptr e) {
    {
      std::lock_guard lock(mu);
      bytes = moved;
      error = std::move(e);
      done = true;
    }
    // After `done`: whoever sees the stream pass the gate also sees the request done.
    io::signal_gate_word(gate);
    cv.notify_all();
  }
  // Blocks until finish(); never throws.
  void wait_quietly() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};

}  // namespace cudakit::gds
