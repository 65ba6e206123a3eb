"""The faults a RIC throws at an xApp, each injected into real processes (the xApp, redis-server,
librmr, the mock E2 node), each test asserting what a user is promised: what is lost is
nothing but what is counted, and recovery comes within a bound derived from the xApp's own
rounds and timeouts. docs/reliability.md tabulates them."""
