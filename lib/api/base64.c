/* Standard base64 with padding, as Kubernetes Secrets carry it. */
#include <stdint.h>

#include "api/internal.h"
#include "funcd/common.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int sextet(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

int funcd__api_base64_decoded_len(const char *s, size_t len, size_t *out)
{
    if (len % 4 != 0)
        return FUNCD_EINVAL;
    size_t pad = 0;
    if (len >= 1 && s[len - 1] == '=')
        pad++;
    if (len >= 2 && s[len - 2] == '=')
        pad++;
    for (size_t i = 0; i < len - pad; i++)
        if (sextet((unsigned char)s[i]) < 0)
            return FUNCD_EINVAL;
    *out = len / 4 * 3 - pad;
    return 0;
}

void funcd__api_base64_decode(const char *s, size_t len, unsigned char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        uint32_t v = 0;
        int n = 0;
        for (int j = 0; j < 4; j++) {
            int x = sextet((unsigned char)s[i + (size_t)j]);
            if (x < 0)
                break;
            v |= (uint32_t)x << (18 - 6 * j);
            n++;
        }
        /* n sextets carry n-1 whole bytes (n is 4, 3 or 2 after validation). */
        for (int j = 0; j < n - 1; j++)
            out[o++] = (unsigned char)(v >> (16 - 8 * j));
    }
}

int funcd__api_base64_encode(const void *data, size_t len, funcd_buf *out)
{
    const unsigned char *p = data;
    if (funcd_buf_grow(out, (len + 2) / 3 * 4) < 0)
        return FUNCD_ENOMEM;
    for (size_t i = 0; i < len; i += 3) {
        size_t n = len - i < 3 ? len - i : 3;
        uint32_t v = (uint32_t)p[i] << 16;
        if (n > 1)
            v |= (uint32_t)p[i + 1] << 8;
        if (n > 2)
            v |= p[i + 2];
        char quad[4] = {alphabet[(v >> 18) & 63], alphabet[(v >> 12) & 63],
                        n > 1 ? alphabet[(v >> 6) & 63] : '=', n > 2 ? alphabet[v & 63] : '='};
        funcd_buf_append(out, quad, 4); /* cannot fail: grown above */
    }
    return funcd_buf_append(out, "", 0); /* NUL-terminates even when len is 0 */
}
