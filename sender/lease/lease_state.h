#pragma once

namespace mailroom {

// What the sender may do with a job it holds, as far as the job's lease goes (the
// LeaseTable decides, the Engine acts on it).
enum class LeaseState {
  kOwned,  // ours, with time left to send it and report the outcome
  kLost,   // not ours (any more): neither send nor report it
  kWait,   // ours, but outcomes are not getting through to the collector: hold it for now
};

}  // namespace mailroom
