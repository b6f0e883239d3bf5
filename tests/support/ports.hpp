// TCP ports on 127.0.0.1 for the servers tests start (redis-server, etcd
// members), safe when test programs run side by side (ctest -j).
//
// A port found free by binding port 0 and closing is in the kernel's range
// for outgoing connections: before the server binds it, another test's
// client connection, or another test's port-0 pick, may take it, and the
// server fails with EADDRINUSE. So the ports handed out here are below that
// range, in [20000, low end - 1000), where the kernel never puts the local
// end of a connection; and every test process of this user takes them in
// turn from one counter file (/tmp/tokenlock-test-ports.UID, under
// flock; tests/support/reserve_port.py is the same for scripts), so two
// processes never get the same port. tests/e2e/webserver.sh's
// pick_port keeps to [10000, 19000) and the netfs rig to [19000, 20000)
// for the same reason.
#pragma once

namespace tokenlock::testing {

// A port that nothing listens on and that no other test process of this
// user was given recently (the counter goes round the whole range before
// it comes back). Throws std::runtime_error when none is found.
int reserve_port();

}  // namespace tokenlock::testing
