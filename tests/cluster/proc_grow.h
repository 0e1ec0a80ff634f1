/* proc_grow: a partition grown from 3 to 5 members and shrunk back to 3 under a continuous
 * writer and consumer, with kill -9 of members in the middle of changes (proc_grow.c). */
#ifndef KL_PROC_GROW_H
#define KL_PROC_GROW_H

void test_grow_shrink_under_load(void);
/* A one-member partition grows to 3 (replica_count 1 -> 2 -> 3) under load. */
void test_grow_from_one_member(void);
/* ... and one without a peer address refuses to grow, naming the field. */
void test_grow_refused_without_peer_address(void);
/* A dead joined member replaced again through a client that learned the configuration. */
void test_replace_a_replaced_member(void);
/* Kills (by pid) every member the test started; safe to call when none runs. */
void gr_stop_all(void);

#endif
