/* ports: loopback TCP ports for tests that listen. Chosen below Linux's ephemeral range
 * (32768+), so that no outgoing connection (including the tests' own dialers) can hold a
 * port a test restarts a listener on. */
#ifndef KL_TEST_PORTS_H
#define KL_TEST_PORTS_H

/* A port in 20000..32699 that could be bound on 127.0.0.1 a moment ago. */
int th_free_port(void);

#endif
