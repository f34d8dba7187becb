// Forwards to collector/schema/migrate.h for the files of migrations/ that still include this
// path. New code includes collector/schema/migrate.h.
#pragma once

#include "collector/schema/migrate.h"  // IWYU pragma: export
