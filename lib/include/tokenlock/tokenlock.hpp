// tokenlock/tokenlock.hpp — everything tokenlock offers, in one include.
//
// tokenlock makes "several processes update one file" safe where flock(2) is
// missing or unreliable. Start with rename_lock.hpp (the lock) and
// errors.hpp (how failures are reported); docs/protocol.md is the protocol
// and docs/api.md a guide.
#pragma once

#include "tokenlock/atomic_write.hpp"
#include "tokenlock/clock.hpp"
#include "tokenlock/clock_judgement.hpp"
#include "tokenlock/doctor.hpp"
#include "tokenlock/errors.hpp"
#include "tokenlock/keep_alive.hpp"
#include "tokenlock/lock.hpp"
#include "tokenlock/open_lock.hpp"
#include "tokenlock/rename_lock.hpp"
#include "tokenlock/signal_cleanup.hpp"
#include "tokenlock/update.hpp"
#include "tokenlock/update_options.hpp"
#include "tokenlock/version.hpp"
