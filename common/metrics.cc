#include "common/metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <exception>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace mailroom {

const std::vector<double> kDeliveryLatencyBuckets = {0.05, 0.1, 0.25, 0.5, 1,   2.5, 5,
                                                     10,   20,  30,   60,  120, 300, 600};
const std::vector<double> kCallDurationBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                  0.25,  0.5,    1,     2.5,  5,     10,   30};

namespace {

// Prometheus' client default buckets, for histograms nobody chose buckets for.
const std::vector<double> kDefaultBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5,   1,    2.5,   5,    10};

prometheus::Labels ToPrometheus(const Labels& labels) {
  return prometheus::Labels(labels.begin(), labels.end());
}

// Answers /healthz: an empty (valid) exposition.
class Nothing : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override { return {}; }
};

}  // namespace

// The scrape path: refresh through the hook, then read the registry, as one step.
class Metrics::HookedCollectable : public prometheus::Collectable {
 public:
  explicit HookedCollectable(const Metrics* metrics) : metrics_(metrics) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    absl::MutexLock lock(&metrics_->collect_mu_);
    if (metrics_->hook_) metrics_->hook_();
    return metrics_->registry_->Collect();
  }

 private:
  const Metrics* const metrics_;
};

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      collectable_(std::make_shared<HookedCollectable>(this)) {}

Metrics::~Metrics() = default;

Metrics::Family* Metrics::Declare(const MetricDef& def) {
  auto it = families_.find(def.name);
  if (it != families_.end()) return &it->second;
  Family f{def};
  // prometheus-cpp throws std::invalid_argument for a name it rejects.
  try {
    switch (def.type) {
      case Type::kCounter:
        f.counters = &prometheus::BuildCounter().Name(def.name).Help(def.help).Register(*registry_);
        break;
      case Type::kGauge:
        f.gauges = &prometheus::BuildGauge().Name(def.name).Help(def.help).Register(*registry_);
        break;
      case Type::kHistogram:
        f.histograms = &prometheus::BuildHistogram().Name(def.name).Help(def.help).Register(
            *registry_);
        break;
    }
  } catch (const std::exception&) {
    return nullptr;
  }
  return &families_.emplace(def.name, std::move(f)).first->second;
}

void Metrics::Drop(Family& f) {
  if (f.counters != nullptr) registry_->Remove(*f.counters);
  if (f.gauges != nullptr) registry_->Remove(*f.gauges);
  if (f.histograms != nullptr) registry_->Remove(*f.histograms);
  f.counters = nullptr;
  f.gauges = nullptr;
  f.histograms = nullptr;
  f.histogram_series.clear();
}

// The series are touched under mu_: Clear() destroys families, so no reference may outlive
// the lock.
void Metrics::Record(const MetricDef& def, const char* const* names, const std::string* values,
                     size_t n, Op op, double v) {
  prometheus::Labels labels;
  for (size_t i = 0; i < n; ++i) labels.emplace(names[i], values[i]);
  absl::MutexLock lock(&mu_);
  Family* f = Declare(def);
  if (f == nullptr) return;
  try {
    if (op == Op::kAdd && f->counters != nullptr) {
      f->counters->Add(labels).Increment(v);
    } else if (op == Op::kAdd && f->gauges != nullptr) {
      f->gauges->Add(labels).Increment(v);
    } else if (op == Op::kSet && f->gauges != nullptr) {
      f->gauges->Add(labels).Set(v);
    } else if (op == Op::kObserve && f->histograms != nullptr) {
      auto it = f->histogram_series.find(labels);
      if (it == f->histogram_series.end()) {
        const std::vector<double>& buckets = f->def.buckets != nullptr ? *f->def.buckets
                                                                       : kDefaultBuckets;
        it = f->histogram_series.emplace(labels, &f->histograms->Add(labels, buckets)).first;
      }
      it->second->Observe(v);
    }
  } catch (const std::exception&) {
    // A rejected label name: nothing recorded (see the class comment).
  }
}

void Metrics::Clear(const MetricDef& def) {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(def.name);
  if (it == families_.end()) return;
  // prometheus-cpp removes series only by handle; re-registering the family drops them all.
  Drop(it->second);
  families_.erase(it);
  Declare(def);
}

double Metrics::Value(const std::string& name, const Labels& labels) const {
  absl::MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  const Family& f = it->second;
  const prometheus::Labels l = ToPrometheus(labels);
  if (f.counters != nullptr && f.counters->Has(l)) return f.counters->Add(l).Value();
  if (f.gauges != nullptr && f.gauges->Has(l)) return f.gauges->Add(l).Value();
  auto series = f.histogram_series.find(l);
  if (series != f.histogram_series.end()) {
    return static_cast<double>(series->second->Collect().histogram.sample_count);
  }
  return 0;
}

void Metrics::SetCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&collect_mu_);
  hook_ = std::move(hook);
}

void KnockTcp(std::string host, int port) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &res) != 0) return;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const bool ok = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
    if (ok) break;
  }
  freeaddrinfo(res);
}

std::string Metrics::Render() const {
  return prometheus::TextSerializer().Serialize(collectable_->Collect());
}

MetricsServer::MetricsServer() = default;
MetricsServer::~MetricsServer() { Stop(); }

absl::Status MetricsServer::Start(const std::string& address, const Metrics* metrics) {
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad metrics address ", address));
  }
  Stop();
  try {
    // civetweb takes "host:port" ("[v6]:port") as its listening_ports option as it is.
    exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/2);
  } catch (const std::exception& e) {
    exposer_.reset();
    return absl::UnavailableError(absl::StrCat("cannot bind ", address, ": ", e.what()));
  }
  const std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty()) {
    exposer_.reset();
    return absl::UnavailableError(absl::StrCat("cannot bind ", address));
  }
  port_ = ports.front();
  host_ = address.substr(0, colon);
  exposer_->RegisterCollectable(metrics->collectable());
  healthz_ = std::make_shared<Nothing>();
  exposer_->RegisterCollectable(healthz_, "/healthz");
  return absl::OkStatus();
}

void MetricsServer::Stop() {
  if (exposer_ != nullptr) {
    // civetweb's listener notices the stop only when its poll() returns, which it does every
    // 2 s or on a connection attempt: knock until it is gone, so shutdown does not stall.
    std::atomic<bool> stopped{false};
    std::thread stopper([&] {
      exposer_.reset();  // joins civetweb's threads
      stopped = true;
    });
    while (!stopped) {
      KnockTcp(host_, port_);
      absl::SleepFor(absl::Milliseconds(20));
    }
    stopper.join();
  }
  healthz_.reset();
}

}  // namespace mailroom
