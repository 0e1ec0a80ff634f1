/* data_end: where a zero-filled file's data ends, for tests that damage a journal
 * segment's records. Header-only, so that the unit harness (Check) and the process tests
 * (no Check) share it without a library of their own. */
#ifndef KL_TEST_DATA_END_H
#define KL_TEST_DATA_END_H

#include <stdio.h>

/* The offset just past the last nonzero byte from f's position to its end (0 when there
 * is none). Reads the rest of f. */
static inline long test_data_end(FILE *f)
{
    long end = 0, off = 0;
    int c;
    while ((c = fgetc(f)) != EOF) {
        off++;
        if (c != 0)
            end = off;
    }
    return end;
}

#endif
