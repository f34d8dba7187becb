#pragma once

#include <string>

#include "common/env.h"

namespace mailroom {

// MAILROOM_PRICE_PER_1000's range: 0.001 is one micro-unit per email, the smallest price the
// budget's integer accounting holds without rounding; 1000 is 1,000,000 micro-units per email,
// the collector's default MAILROOM_MAX_COST_MICROS.
inline constexpr double kMinPricePer1000 = 0.001;
inline constexpr double kMaxPricePer1000 = 1000;

// Every setting of the sender, one row each (name, default, range, secret, one line of help),
// the secondary transport's MAILROOM_FAILOVER_* rows included: LoadSenderConfig reads values
// through these rows, `sender --help` prints them and docs/configuration_test checks
// docs/configuration.md against them. A new setting is a new row in sender/config/settings.cc, read
// in config.cc with env.Int(SenderSetting("MAILROOM_...")) and the like; a transport's settings
// are rows of its registry entry (sender/transport/registry.h), read by the entry.
const SettingsTable& SenderSettings();

// The row of `name` (aborts when there is none: a programming error every loader test finds).
const SettingSpec& SenderSetting(const std::string& name);

}  // namespace mailroom
