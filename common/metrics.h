#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace httplib {
class Server;
}

namespace mailroom {

// Label pairs of one time series, e.g. {{"group", "mailroom"}, {"outcome", "sent"}}.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A small Prometheus registry: counters and gauges keyed by name and labels, rendered in the
// text exposition format. Thread-safe. Names must be declared with Describe() first so that
// HELP and TYPE lines are right; undeclared names are rendered as untyped.
class Metrics {
 public:
  enum class Type { kCounter, kGauge };

  void Describe(const std::string& name, Type type, const std::string& help);
  // Adds `v` (>= 0 for counters) to a series.
  void Add(const std::string& name, double v, const Labels& labels = {});
  // Sets a gauge series.
  void Set(const std::string& name, double v, const Labels& labels = {});
  // Removes every series of `name` (for gauges whose label sets come and go).
  void Clear(const std::string& name);
  // Current value of a series (0 when absent); for tests.
  double Value(const std::string& name, const Labels& labels = {}) const;
  // Runs before each Render(), outside the registry lock (e.g. to refresh gauges from a
  // database). Errors are the hook's own business.
  void SetCollectHook(std::function<void()> hook);
  // The exposition text.
  std::string Render() const;

 private:
  struct Family {
    Type type = Type::kGauge;
    std::string help;
    bool described = false;
    std::map<std::string, double> series;  // rendered label set -> value
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
  std::function<void()> hook_;
};

// Serves GET /metrics (and GET /healthz) over HTTP on `address` (host:port) from a background
// thread. Stop() or destruction stops it.
class MetricsServer {
 public:
  MetricsServer();
  ~MetricsServer();
  // Binds and starts serving; fails if the address cannot be bound.
  absl::Status Start(const std::string& address, const Metrics* metrics);
  // The bound port (useful with port 0).
  int port() const { return port_; }
  void Stop();

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace mailroom
