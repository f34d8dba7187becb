// Forwards to collector/dispatch/signing.h for the files of migrations/ that still include this
// path. New code includes collector/dispatch/signing.h.
#pragma once

#include "collector/dispatch/signing.h"  // IWYU pragma: export
