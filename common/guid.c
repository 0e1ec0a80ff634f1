#include "common/guid.h"

#include <sodium.h>
#include <stdio.h>

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool kl_guid_parse(const char *text, uint8_t out[KL_GUID_LEN])
{
    if (text == NULL)
        return false;
    size_t n = 0;
    for (size_t i = 0; i < KL_GUID_TEXT_LEN; i++) {
        char c = text[i];
        if (c == '\0')
            return false;
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-')
                return false;
            continue;
        }
        int hi = hexval(c), lo = hexval(text[i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[n++] = (uint8_t)(hi << 4 | lo);
        i++;
    }
    return text[KL_GUID_TEXT_LEN] == '\0' && n == KL_GUID_LEN;
}

void kl_guid_format(const uint8_t g[KL_GUID_LEN], char out[KL_GUID_TEXT_LEN + 1])
{
    snprintf(out, KL_GUID_TEXT_LEN + 1,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11],
             g[12], g[13], g[14], g[15]);
}

bool kl_guid_valid(const uint8_t *g, size_t len)
{
    if (g == NULL || len != KL_GUID_LEN)
        return false;
    for (size_t i = 0; i < len; i++)
        if (g[i] != 0)
            return true;
    return false;
}

void kl_guid_random(uint8_t out[KL_GUID_LEN])
{
    randombytes_buf(out, KL_GUID_LEN);
    out[6] = (uint8_t)((out[6] & 0x0f) | 0x40);
    out[8] = (uint8_t)((out[8] & 0x3f) | 0x80);
}
