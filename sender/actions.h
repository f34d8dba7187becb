#pragma once

// The actions' names live in sender/delivery/actions.h. This header forwards to it for the
// migrations' interface test (//migrations:interface_test), which still names this path and
// //sender:actions; it goes once that test names sender/delivery/actions.h.
#include "sender/delivery/actions.h"  // IWYU pragma: export
