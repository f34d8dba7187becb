#pragma once

#include "common/env.h"

namespace mailroom {

// Every setting of the collector, one row each (name, default, range, secret, one line of
// help): LoadCollectorConfig reads values through these rows, `collector --help` prints them
// and docs/configuration_test checks docs/configuration.md against them. A new setting is a new
// row here, read in config.cc with env.Int(CollectorSetting("MAILROOM_...")) and the like.
const SettingsTable& CollectorSettings();

// The row of `name` (aborts when there is none: a programming error every loader test finds).
const SettingSpec& CollectorSetting(const char* name);

}  // namespace mailroom
