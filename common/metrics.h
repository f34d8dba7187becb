#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
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

enum class MetricType { kCounter, kGauge, kHistogram };

// What a metric is, apart from its label names: see Metric.
struct MetricDef {
  const char* name;
  MetricType type;
  const char* help;
  // Histograms: the bucket upper bounds (increasing; +Inf is implicit); nullptr: Prometheus'
  // default buckets.
  const std::vector<double>* buckets;
};

// A metric, declared once per service as a constant (e.g. in collector/metrics/) and recorded
// through with Metrics' methods, so that a misspelt metric, a counter set like a gauge or a
// wrong number of label values does not compile. `N` is the number of labels.
template <MetricType T, size_t N>
struct Metric {
  MetricDef def;
  std::array<const char*, N> labels;
};
template <size_t N>
using Counter = Metric<MetricType::kCounter, N>;
template <size_t N>
using Gauge = Metric<MetricType::kGauge, N>;
template <size_t N>
using Histogram = Metric<MetricType::kHistogram, N>;

// Declarations: CounterMetric("mailroom_jobs_total", "Jobs, by outcome.", "outcome").
template <typename... L>
constexpr Counter<sizeof...(L)> CounterMetric(const char* name, const char* help, L... labels) {
  return {{name, MetricType::kCounter, help, nullptr}, {labels...}};
}
template <typename... L>
constexpr Gauge<sizeof...(L)> GaugeMetric(const char* name, const char* help, L... labels) {
  return {{name, MetricType::kGauge, help, nullptr}, {labels...}};
}
template <typename... L>
constexpr Histogram<sizeof...(L)> HistogramMetric(const char* name, const char* help,
                                                  const std::vector<double>* buckets, L... labels) {
  return {{name, MetricType::kHistogram, help, buckets}, {labels...}};
}

// The values of a series' labels, in the order of the metric's label names: exactly N of them.
template <size_t N>
class LabelValues {
 public:
  template <typename... V,
            typename = std::enable_if_t<sizeof...(V) == N &&
                                        (std::is_constructible_v<std::string, V> && ...)>>
  LabelValues(V&&... values) : values_{std::string(std::forward<V>(values))...} {}  // NOLINT
  const std::string* data() const { return values_.data(); }

 private:
  std::array<std::string, N> values_;
};

// The services' metrics: a thin facade over a prometheus-cpp registry (counters, gauges,
// histograms), recorded through the Metric constants each service declares. Thread-safe. A
// metric's family (HELP, TYPE) is registered at its first series; a scrape shows families
// with series only. A name or label name Prometheus rejects is ignored: nothing is recorded.
class Metrics {
 public:
  using Type = MetricType;

  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Adds `v` to a counter (v < 0 is ignored) or a gauge (either sign).
  template <size_t N>
  void Add(const Counter<N>& m, double v, const LabelValues<N>& values = {}) {
    Record(m.def, m.labels.data(), values.data(), N, Op::kAdd, v);
  }
  template <size_t N>
  void Add(const Gauge<N>& m, double v, const LabelValues<N>& values = {}) {
    Record(m.def, m.labels.data(), values.data(), N, Op::kAdd, v);
  }
  // Sets a gauge series.
  template <size_t N>
  void Set(const Gauge<N>& m, double v, const LabelValues<N>& values = {}) {
    Record(m.def, m.labels.data(), values.data(), N, Op::kSet, v);
  }
  // Records one observation in a histogram series.
  template <size_t N>
  void Observe(const Histogram<N>& m, double v, const LabelValues<N>& values = {}) {
    Record(m.def, m.labels.data(), values.data(), N, Op::kObserve, v);
  }
  // Removes every series of a gauge (for gauges whose label sets come and go).
  template <size_t N>
  void Clear(const Gauge<N>& m) {
    Clear(m.def);
  }
  // Current value of a counter or gauge series, or the number of observations of a histogram
  // series (0 when absent), by the name and labels a scrape shows; for tests.
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
    MetricDef def;
    prometheus::Family<prometheus::Counter>* counters = nullptr;
    prometheus::Family<prometheus::Gauge>* gauges = nullptr;
    prometheus::Family<prometheus::Histogram>* histograms = nullptr;
    // prometheus-cpp builds a whole Histogram on every Family::Add, even for a series it has.
    std::map<std::map<std::string, std::string>, prometheus::Histogram*> histogram_series{};
  };

  enum class Op { kAdd, kSet, kObserve };

  // Applies `op` to the series of `def` with these label names and values.
  void Record(const MetricDef& def, const char* const* names, const std::string* values, size_t n,
              Op op, double v);
  void Clear(const MetricDef& def);
  // Creates (or returns) the family `def.name`; nullptr when Prometheus rejects the name.
  Family* Declare(const MetricDef& def) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
