// Helpers shared by the TunableOp suites (test_tunable.cpp, test_tunable_batched.cpp): file
// read / write, and the fixture that gives each test fresh settings, results, candidates and
// dispatch cache, a temporary directory, and the warnings TunableOp reported.
#pragma once

#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <system_error>

#include "cudakit/tunable.hpp"
#include "tunable/candidates.hpp"
#include "tunable/dispatch.hpp"
#include "tunable/results.hpp"
#include "tunable/settings.hpp"

namespace cudakit::tunable_test {

namespace fs = std::filesystem;
namespace td = cudakit::tunable::detail;

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void spit(const fs::path& p, const std::string& text) {
  std::ofstream out(p);
  out << text;
}

class TunableFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    td::settings_unchecked().reset_for_testing();
    td::store().reset_for_testing();
    td::clear_extra_candidates();
    td::reset_dispatch_for_testing();
    tunable::set_warning_handler([this](const std::string& m) {
      std::lock_guard<std::mutex> l(mu_);
      warnings_ += m + "\n";
    });
    tunable::set_filename("");  // no file unless a test names one (never the working directory)
    char tmpl[] = "/tmp/cudakit_tunable_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    tunable::set_warning_handler(nullptr);
    td::clear_extra_candidates();
    td::settings_unchecked().reset_for_testing();
    td::store().reset_for_testing();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // Every warning so far, one per line.
  std::string warnings() {
    std::lock_guard<std::mutex> l(mu_);
    return warnings_;
  }
  fs::path dir_;

 private:
  std::mutex mu_;
  std::string warnings_;
};

}  // namespace cudakit::tunable_test
