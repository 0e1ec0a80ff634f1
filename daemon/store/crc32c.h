/* crc32c: the CRC-32C (Castagnoli) checksum that guards the journal's frames (journal.h).
 *
 * Why this and not BLAKE2b: a frame's check only has to catch torn and damaged writes, not
 * an adversary (the journal is the member's own file), and on this project's hosts BLAKE2b
 * ran at about 600 MB/s, 3.7% of a follower's CPU under transfer load, where the SSE4.2
 * instruction does many gigabytes a second. CRC-32C detects every burst of up to 32 bits
 * and any odd number of flipped bits, and misses other damage with probability 2^-32.
 *
 * Pure: no state beyond a table built once (thread-safe: built by a pthread_once). */
#ifndef KL_STORE_CRC32C_H
#define KL_STORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of p[0..n) continuing from crc (0 to start; pass the last result to extend
 * it over more bytes). Uses the CPU's crc32 instruction when it has one.
 * Cost: O(n), about 8 bytes a cycle with SSE4.2, 1 byte a cycle without. */
uint32_t kl_crc32c(uint32_t crc, const void *p, size_t n);

/* For tests: the table-driven and the instruction-driven computations alone. The second
 * must only be called when kl_crc32c_have_instruction() is true. */
uint32_t kl_crc32c_table(uint32_t crc, const void *p, size_t n);
uint32_t kl_crc32c_instruction(uint32_t crc, const void *p, size_t n);
int kl_crc32c_have_instruction(void);

#endif
