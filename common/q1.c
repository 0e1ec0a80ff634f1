/* q1: a hand-written recursive-descent parser of Q1 CALL statements (common/q1.h). The
 * grammar is small and fixed; a generator would add a build step for twenty rules. JSON
 * literals are delimited here (bracket matching outside JSON strings, depth bounded) and
 * then parsed by jansson, which the daemon and SDK already link. */
#include "common/q1.h"

#include "common/guid.h"

#include <stdlib.h>
#include <string.h>

typedef struct cursor {
    const char *s;
    size_t len, pos;
    int line, col;
} cursor;

static bool at_end(const cursor *c) { return c->pos >= c->len; }
static char peek(const cursor *c) { return at_end(c) ? '\0' : c->s[c->pos]; }

static void advance(cursor *c)
{
    if (at_end(c))
        return;
    if (c->s[c->pos] == '\n') {
        c->line++;
        c->col = 1;
    } else {
        c->col++;
    }
    c->pos++;
}

static void skip_ws(cursor *c)
{
    while (!at_end(c)) {
        char ch = peek(c);
        if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n')
            advance(c);
        else
            break;
    }
}

static bool is_alpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }
static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }
static char lower(char ch) { return (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch; }

/* What the cursor is at, by kind only (never the text: it may be a token or a body). */
static const char *found(const cursor *c)
{
    if (at_end(c))
        return "the end of the statement";
    char ch = peek(c);
    if (ch == '\'')
        return "a string literal";
    if (ch == '{')
        return "a JSON object";
    if (is_digit(ch) || ch == '-')
        return "a number";
    if (is_alpha(ch) || ch == '_')
        return "a word";
    switch (ch) {
    case '(': return "'('";
    case ')': return "')'";
    case ',': return "','";
    case ';': return "';'";
    case '=': return "'='";
    default: return "another character";
    }
}

static kl_code expected(const cursor *c, const char *what, kl_err *err)
{
    return kl_fail(err, KL_INVALID_ARGUMENT, "statement",
                   "Q1 syntax error at line %d, column %d: expected %s, found %s", c->line, c->col,
                   what, found(c));
}

/* A word: letters, digits and '_' (argument names, keywords), plus '.' and '-' when
 * alias is set (alias names such as keyload.queue-transfer.create.v1). Lower-cased into
 * buf (KL_Q1_NAME_MAX + 1). False when no word starts here. */
static bool word(cursor *c, bool alias, char *buf, int *too_long)
{
    size_t n = 0;
    *too_long = 0;
    char ch = peek(c);
    if (!(is_alpha(ch) || ch == '_'))
        return false;
    while (!at_end(c)) {
        ch = peek(c);
        if (!(is_alpha(ch) || is_digit(ch) || ch == '_' || (alias && (ch == '.' || ch == '-'))))
            break;
        if (n < KL_Q1_NAME_MAX)
            buf[n++] = lower(ch);
        else
            *too_long = 1;
        advance(c);
    }
    buf[n] = '\0';
    return true;
}

/* Consumes the keyword kw (lower-case) when the next word is exactly it. */
static bool keyword(cursor *c, const char *kw)
{
    size_t n = strlen(kw);
    if (c->len - c->pos < n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (lower(c->s[c->pos + i]) != kw[i])
            return false;
    if (c->pos + n < c->len) {
        char next = c->s[c->pos + n];
        if (is_alpha(next) || is_digit(next) || next == '_')
            return false;
    }
    for (size_t i = 0; i < n; i++)
        advance(c);
    return true;
}

/* RFC 3629 UTF-8 without overlongs, surrogates or values above U+10FFFF. */
static bool utf8_valid(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char b = p[i];
        size_t k;
        uint32_t cp;
        if (b < 0x80) {
            i++;
            continue;
        } else if ((b & 0xE0) == 0xC0) {
            k = 1;
            cp = b & 0x1F;
        } else if ((b & 0xF0) == 0xE0) {
            k = 2;
            cp = b & 0x0F;
        } else if ((b & 0xF8) == 0xF0) {
            k = 3;
            cp = b & 0x07;
        } else {
            return false;
        }
        if (n - i <= k)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k + 1;
    }
    return true;
}

/* 'text' with '' for a quote. On KL_OK *out is malloc'd. */
static kl_code string_lit(cursor *c, char **out, kl_err *err)
{
    int line = c->line, col = c->col;
    advance(c); /* the opening quote */
    size_t start = c->pos, quotes = 0;
    for (;;) {
        if (at_end(c))
            return kl_fail(err, KL_INVALID_ARGUMENT, "statement",
                           "Q1 syntax error at line %d, column %d: the string literal starting "
                           "there is not terminated (expected a closing ')",
                           line, col);
        if (peek(c) == '\'') {
            if (c->pos + 1 < c->len && c->s[c->pos + 1] == '\'') {
                advance(c);
                advance(c);
                quotes++;
                continue;
            }
            break;
        }
        advance(c);
    }
    size_t raw = c->pos - start;
    advance(c); /* the closing quote */
    char *s = malloc(raw - quotes + 1);
    if (s == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < raw; i++) {
        s[n++] = c->s[start + i];
        if (c->s[start + i] == '\'')
            i++; /* '' is one quote */
    }
    s[n] = '\0';
    if (!utf8_valid((const unsigned char *)s, n)) {
        free(s);
        return kl_fail(err, KL_INVALID_ARGUMENT, "statement",
                       "Q1 error at line %d, column %d: the string literal is not valid UTF-8",
                       line, col);
    }
    *out = s;
    return KL_OK;
}

/* [-]digits, within int64; a '.' or exponent after the digits is refused by name. */
static kl_code int_lit(cursor *c, int64_t *out, kl_err *err)
{
    int line = c->line, col = c->col;
    bool neg = false;
    if (peek(c) == '-') {
        neg = true;
        advance(c);
    }
    if (!is_digit(peek(c)))
        return expected(c, "a digit after '-'", err);
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    bool overflow = false;
    while (is_digit(peek(c))) {
        uint64_t d = (uint64_t)(peek(c) - '0');
        if (v > (limit - d) / 10)
            overflow = true;
        else
            v = v * 10 + d;
        advance(c);
    }
    if (peek(c) == '.' || peek(c) == 'e' || peek(c) == 'E')
        return kl_fail(err, KL_INVALID_ARGUMENT, "statement",
                       "Q1 error at line %d, column %d: numbers are integers (no fraction or "
                       "exponent); put a double message field in a fields JSON object",
                       line, col);
    if (overflow)
        return kl_fail(err, KL_INVALID_ARGUMENT, "statement",
                       "Q1 error at line %d, column %d: the integer is outside the 64-bit range",
                       line, col);
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return KL_OK;
}

/* A JSON object: delimited here (depth bounded, strings skipped), parsed by jansson. */
static kl_code json_lit(cursor *c, json_t **out, kl_err *err)
{
    int line = c->line, col = c->col;
    size_t start = c->pos;
    int depth = 0;
    bool in_str = false;
    while (!at_end(c)) {
        char ch = peek(c);
        if (in_str) {
            if (ch == '\\') {
                advance(c);
            } else if (ch == '"') {
                in_str = false;
            }
        } else if (ch == '"') {
            in_str = true;
        } else if (ch == '{' || ch == '[') {
            if (++depth > KL_Q1_JSON_DEPTH_MAX)
                return kl_fail(err, KL_INVALID_ARGUMENT, "limit:KL_Q1_JSON_DEPTH_MAX",
                               "Q1 error at line %d, column %d: the JSON object nests deeper "
                               "than %d levels",
                               c->line, c->col, KL_Q1_JSON_DEPTH_MAX);
        } else if (ch == '}' || ch == ']') {
            if (--depth == 0) {
                advance(c);
                break;
            }
        }
        advance(c);
    }
    if (depth != 0)
        return kl_fail(err, KL_INVALID_ARGUMENT, "statement",
                       "Q1 syntax error at line %d, column %d: the JSON object starting there "
                       "is not closed",
                       line, col);
    json_error_t je;
    json_t *j = json_loadb(c->s + start, c->pos - start, JSON_REJECT_DUPLICATES, &je);
    if (j == NULL || !json_is_object(j)) {
        json_decref(j);
        /* jansson's text quotes the input near the fault: only its position is used. */
        return kl_fail(err, KL_INVALID_ARGUMENT, "statement",
                       "Q1 error at line %d, column %d: the JSON object starting there is not "
                       "valid JSON (RFC 8259; duplicate keys are refused) near its byte %d",
                       line, col, j == NULL ? je.position : 0);
    }
    *out = j;
    return KL_OK;
}

static kl_code value(cursor *c, kl_q1_arg *a, kl_err *err)
{
    a->line = c->line;
    a->column = c->col;
    char ch = peek(c);
    if (ch == '\'') {
        a->kind = KL_Q1_STRING;
        return string_lit(c, &a->str, err);
    }
    if (ch == '-' || is_digit(ch)) {
        a->kind = KL_Q1_INT;
        return int_lit(c, &a->i, err);
    }
    if (ch == '{') {
        a->kind = KL_Q1_JSON;
        return json_lit(c, &a->json, err);
    }
    if (keyword(c, "true")) {
        a->kind = KL_Q1_BOOL;
        a->b = true;
        return KL_OK;
    }
    if (keyword(c, "false")) {
        a->kind = KL_Q1_BOOL;
        a->b = false;
        return KL_OK;
    }
    if (keyword(c, "null")) {
        a->kind = KL_Q1_NULL;
        return KL_OK;
    }
    return expected(c, "a value (a 'string', an integer, TRUE, FALSE, NULL or a {JSON object})",
                    err);
}

static kl_code arg(cursor *c, kl_q1_call *call, kl_err *err)
{
    char name[KL_Q1_NAME_MAX + 1];
    int line = c->line, col = c->col, too_long;
    if (!word(c, false, name, &too_long))
        return expected(c, "an argument name", err);
    if (too_long)
        return kl_fail(err, KL_INVALID_ARGUMENT, "limit:KL_Q1_NAME_MAX",
                       "Q1 error at line %d, column %d: an argument name is longer than %d bytes",
                       line, col, KL_Q1_NAME_MAX);
    if (kl_q1_find(call, name) != NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, name,
                       "Q1 error at line %d, column %d: argument %s is given twice", line, col,
                       name);
    if (call->n_args >= KL_Q1_ARGS_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "limit:KL_Q1_ARGS_MAX",
                       "Q1 error at line %d, column %d: more than %d arguments", line, col,
                       KL_Q1_ARGS_MAX);
    skip_ws(c);
    if (!(peek(c) == '=' && c->pos + 1 < c->len && c->s[c->pos + 1] == '>'))
        return expected(c, "'=>' after the argument name", err);
    advance(c);
    advance(c);
    skip_ws(c);
    kl_q1_arg *a = &call->args[call->n_args];
    memset(a, 0, sizeof *a);
    a->name = strdup(name);
    if (a->name == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    call->n_args++; /* owned by the call from here, even when its value fails */
    return value(c, a, err);
}

static kl_code statement(cursor *c, kl_q1_call *call, kl_err *err)
{
    skip_ws(c);
    if (!keyword(c, "call"))
        return expected(c, "CALL", err);
    skip_ws(c);
    char name[KL_Q1_NAME_MAX + 1];
    int line = c->line, col = c->col, too_long;
    if (!word(c, true, name, &too_long))
        return expected(c, "an alias name (e.g. keyload.queue.enqueue.v1)", err);
    if (too_long)
        return kl_fail(err, KL_INVALID_ARGUMENT, "limit:KL_Q1_NAME_MAX",
                       "Q1 error at line %d, column %d: the alias name is longer than %d bytes",
                       line, col, KL_Q1_NAME_MAX);
    if ((call->alias = strdup(name)) == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    skip_ws(c);
    if (peek(c) != '(')
        return expected(c, "'(' after the alias name", err);
    advance(c);
    skip_ws(c);
    call->args = calloc(KL_Q1_ARGS_MAX, sizeof *call->args);
    if (call->args == NULL)
        return kl_fail(err, KL_INTERNAL, "memory", "out of memory");
    kl_code rc;
    if (peek(c) != ')') {
        for (;;) {
            if ((rc = arg(c, call, err)) != KL_OK)
                return rc;
            skip_ws(c);
            if (peek(c) == ',') {
                advance(c);
                skip_ws(c);
                continue;
            }
            if (peek(c) == ')')
                break;
            return expected(c, "',' or ')' after an argument", err);
        }
    }
    advance(c); /* ')' */
    skip_ws(c);
    if (keyword(c, "with")) {
        skip_ws(c);
        if (!keyword(c, "command_id"))
            return expected(c, "COMMAND_ID after WITH", err);
        skip_ws(c);
        if (peek(c) != '\'')
            return expected(c, "the command id as a 'string' (a GUID)", err);
        int vline = c->line, vcol = c->col;
        char *id;
        if ((rc = string_lit(c, &id, err)) != KL_OK)
            return rc;
        bool ok = kl_guid_parse(id, call->command_id) && kl_guid_valid(call->command_id, 16);
        free(id);
        if (!ok)
            return kl_fail(err, KL_INVALID_ARGUMENT, "command_id",
                           "Q1 error at line %d, column %d: COMMAND_ID must be a GUID "
                           "(xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), not all zero",
                           vline, vcol);
        call->has_command_id = true;
        skip_ws(c);
    }
    if (peek(c) == ';') {
        advance(c);
        skip_ws(c);
    }
    if (!at_end(c))
        return expected(c, call->has_command_id ? "';' or the end of the statement"
                                                : "WITH COMMAND_ID, ';' or the end of the statement",
                        err);
    return KL_OK;
}

kl_code kl_q1_parse(const char *text, size_t len, kl_q1_call *out, kl_err *err)
{
    memset(out, 0, sizeof *out);
    if (text == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "statement", "the statement is missing");
    if (len > KL_Q1_STATEMENT_MAX)
        return kl_fail(err, KL_INVALID_ARGUMENT, "limit:KL_Q1_STATEMENT_MAX",
                       "the statement is %zu bytes; at most %d are allowed", len,
                       KL_Q1_STATEMENT_MAX);
    if (memchr(text, '\0', len) != NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "statement", "the statement contains a NUL byte");
    cursor c = {.s = text, .len = len, .pos = 0, .line = 1, .col = 1};
    kl_code rc = statement(&c, out, err);
    if (rc != KL_OK)
        kl_q1_call_free(out);
    return rc;
}

void kl_q1_call_free(kl_q1_call *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n_args; i++) {
        free(c->args[i].name);
        if (c->args[i].str != NULL) {
            /* string values may be tokens or bodies: wiped before they go back to malloc */
            memset(c->args[i].str, 0, strlen(c->args[i].str));
            free(c->args[i].str);
        }
        json_decref(c->args[i].json);
    }
    free(c->args);
    free(c->alias);
    memset(c, 0, sizeof *c);
}

const kl_q1_arg *kl_q1_find(const kl_q1_call *c, const char *name)
{
    for (size_t i = 0; i < c->n_args; i++)
        if (strcmp(c->args[i].name, name) == 0)
            return &c->args[i];
    return NULL;
}

const char *kl_q1_kind_name(kl_q1_kind k)
{
    switch (k) {
    case KL_Q1_STRING: return "a string";
    case KL_Q1_INT: return "an integer";
    case KL_Q1_BOOL: return "a boolean";
    case KL_Q1_NULL: return "NULL";
    case KL_Q1_JSON: return "a JSON object";
    }
    return "unknown";
}
