#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace prometheus {
class Collectable;
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace mailroom {

// Label pairs of one time series, e.g. {{"group", "mailroom"}, {"outcome", "sent"}}.
using Labels = std::vector<std::pair<std::string, std::string>>;

// Bucket upper bounds (seconds) for latencies that matter on the scale of a person waiting for
// an email: the recovery-email objective is stated in tens of seconds, the buckets reach 10 min.
extern const std::vector<double> kDeliveryLatencyBuckets;
// Bucket upper bounds (seconds) for one database statement or one provider call: 1 ms .. 30 s.
extern const std::vector<double> kCallDurationBuckets;

// The services' metrics, by name: a thin facade over a prometheus-cpp registry (counters,
// gauges, histograms keyed by name and labels). Thread-safe. Declare a name with Describe()
// (or DescribeHistogram()) so that its HELP and TYPE are right; a name used undeclared becomes an
// untyped-looking gauge (Add/Set) or a histogram with Prometheus' default buckets (Observe).
// A name or label name Prometheus rejects is ignored: nothing is recorded for it.
class Metrics {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Declares `name`. A histogram declared here gets Prometheus' default buckets; use
  // DescribeHistogram() to choose them. Declaring a name again with the same type is a no-op;
  // with another type it drops the name's series.
  void Describe(const std::string& name, Type type, const std::string& help);
  // Declares a histogram with these bucket upper bounds (increasing; +Inf is implicit).
  void DescribeHistogram(const std::string& name, const std::string& help,
                         std::vector<double> buckets);
  // Adds `v` to a counter (v < 0 is ignored) or a gauge (either sign).
  void Add(const std::string& name, double v, const Labels& labels = {});
  // Sets a gauge series.
  void Set(const std::string& name, double v, const Labels& labels = {});
  // Records one observation in a histogram series.
  void Observe(const std::string& name, double v, const Labels& labels = {});
  // Removes every series of `name` (for gauges whose label sets come and go).
  void Clear(const std::string& name);
  // Current value of a counter or gauge series, or the number of observations of a histogram
  // series (0 when absent); for tests.
  double Value(const std::string& name, const Labels& labels = {}) const;
  // Runs before each collection (a scrape or Render()), e.g. to refresh gauges from a
  // database; collections are serialized, so the hook never runs twice at once. Errors are the
  // hook's own business. Set it before MetricsServer::Start().
  void SetCollectHook(std::function<void()> hook);
  // The text exposition format, as a scrape would see it.
  std::string Render() const;

  // What MetricsServer exposes: collecting it runs the hook, then reads the registry. Owned by
  // this object (a scrape after its destruction finds nothing).
  std::weak_ptr<prometheus::Collectable> collectable() const { return collectable_; }

 private:
  class HookedCollectable;
  struct Family {
    Type type = Type::kGauge;
    std::string help;
    prometheus::Family<prometheus::Counter>* counters = nullptr;
    prometheus::Family<prometheus::Gauge>* gauges = nullptr;
    prometheus::Family<prometheus::Histogram>* histograms = nullptr;
    std::vector<double> buckets;  // histograms only
    // prometheus-cpp builds a whole Histogram on every Family::Add, even for a series it has.
    std::map<std::map<std::string, std::string>, prometheus::Histogram*> histogram_series;
  };

  // Creates (or returns) the family `name`; nullptr when Prometheus rejects the name.
  Family* Declare(const std::string& name, Type type, const std::string& help,
                  std::vector<double> buckets) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Family* Find(const std::string& name, Type type_if_new) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drop(Family& f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> collectable_;
  mutable absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
  // Held across hook + collection so concurrent scrapes see whole refreshes.
  mutable absl::Mutex collect_mu_;
  std::function<void()> hook_;
};

// Opens and closes one TCP connection to host:port (a wildcard host means this machine): wakes
// a civetweb listener blocked in poll() so that stopping it does not wait for its timeout.
void KnockTcp(std::string host, int port);

// Serves GET /metrics (prometheus-cpp's Exposer: civetweb) on `address` (host:port, port 0
// picks a free one) from background threads, and GET /healthz (200, empty body). Stop() or
// destruction stops it. Not thread-safe: start and stop it from one thread.
class MetricsServer {
 public:
  MetricsServer();
  ~MetricsServer();
  // Binds and starts serving; fails (kInvalidArgument for a malformed address, kUnavailable
  // when it cannot be bound) without serving anything.
  absl::Status Start(const std::string& address, const Metrics* metrics);
  // The bound port (the one chosen, with port 0); 0 before Start().
  int port() const { return port_; }
  void Stop();

 private:
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Collectable> healthz_;
  std::string host_;
  int port_ = 0;
};

}  // namespace mailroom
