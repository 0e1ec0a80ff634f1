/* q1: the parser of Q1 statements (README "Q1 statements"). Pure: text in, a parsed
 * call or a kl_err out; no I/O, no global state. The daemon (which executes statements) and
 * the SDK (which routes them) both link it, so both read a statement exactly alike.
 *
 *   CALL alias(name => value, ...) [WITH COMMAND_ID 'guid'] [;]
 *
 * Values: 'single-quoted strings' ('' is one quote), integers (decimals are refused: no
 * alias argument takes a fraction; a double message field is written inside a fields JSON
 * object), TRUE, FALSE, NULL and JSON objects ({...}, RFC 8259). Keywords, alias names and
 * argument names are case-insensitive (kept lower-case); an argument name may appear once.
 *
 * Bounds: a statement is at most KL_Q1_STATEMENT_MAX bytes of UTF-8 without NUL; at most
 * KL_Q1_ARGS_MAX arguments; names at most KL_Q1_NAME_MAX bytes; a JSON literal nests at
 * most KL_Q1_JSON_DEPTH_MAX levels (the outer object is level 1).
 *
 * Errors are INVALID_ARGUMENT. Syntax errors have detail "statement" and say "line L,
 * column C" (1-based, columns in bytes) and what was expected there; they describe what was
 * found by its kind only ("a string literal"), never by its content, so token and body
 * values never reach an error message or a log. Thread-safety: reentrant. */
#ifndef KL_Q1_H
#define KL_Q1_H

#include "common/limits.h"
#include "common/status.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


typedef enum kl_q1_kind {
    KL_Q1_STRING,
    KL_Q1_INT,
    KL_Q1_BOOL,
    KL_Q1_NULL,
    KL_Q1_JSON,
} kl_q1_kind;

typedef struct kl_q1_arg {
    char *name;          /* lower-case identifier, owned */
    kl_q1_kind kind;
    char *str;           /* KL_Q1_STRING: the unescaped UTF-8 value, owned (no NUL inside) */
    int64_t i;           /* KL_Q1_INT */
    bool b;              /* KL_Q1_BOOL */
    json_t *json;        /* KL_Q1_JSON: an object, owned (one reference) */
    int line, column;    /* where the value starts */
} kl_q1_arg;

typedef struct kl_q1_call {
    char *alias;         /* lower-case, owned */
    kl_q1_arg *args;     /* n_args entries, owned, in statement order */
    size_t n_args;
    bool has_command_id;
    uint8_t command_id[16]; /* with has_command_id: a valid GUID (not all zero) */
} kl_q1_call;

/* Parses text[0..len). On KL_OK *out is filled (kl_q1_call_free); on error *out is empty
 * and err says where and what (INVALID_ARGUMENT). */
kl_code kl_q1_parse(const char *text, size_t len, kl_q1_call *out, kl_err *err);
/* Frees what a parse filled and empties the call. Accepts an empty or zeroed call. */
void kl_q1_call_free(kl_q1_call *c);

/* The argument named `name` (lower-case), or NULL. */
const kl_q1_arg *kl_q1_find(const kl_q1_call *c, const char *name);
/* "a string", "an integer", "a boolean", "NULL", "a JSON object": for error messages. */
const char *kl_q1_kind_name(kl_q1_kind k);

#endif
