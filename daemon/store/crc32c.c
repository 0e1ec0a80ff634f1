/* crc32c: see crc32c.h. */
#include "daemon/store/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY_REFLECTED 0x82F63B78u

static uint32_t table[256];
static int have_instruction;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void build(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY_REFLECTED : c >> 1;
        table[i] = c;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_instruction = __builtin_cpu_supports("sse4.2");
#endif
}

int kl_crc32c_have_instruction(void)
{
    pthread_once(&once, build);
    return have_instruction;
}

uint32_t kl_crc32c_table(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&once, build);
    const uint8_t *b = p;
    crc = ~crc;
    while (n--)
        crc = table[(crc ^ *b++) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t kl_crc32c_instruction(uint32_t crc, const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t c = (uint32_t)~crc;
    while (n > 0 && ((uintptr_t)b & 7u) != 0) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *b++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        c = __builtin_ia32_crc32di(c, w);
        b += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = __builtin_ia32_crc32qi((uint32_t)c, *b++);
    return ~(uint32_t)c;
}
#else
uint32_t kl_crc32c_instruction(uint32_t crc, const void *p, size_t n)
{
    return kl_crc32c_table(crc, p, n);
}
#endif

uint32_t kl_crc32c(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&once, build);
    return have_instruction ? kl_crc32c_instruction(crc, p, n) : kl_crc32c_table(crc, p, n);
}
