/* log: structured one-line logs on stderr: `ts=... level=... comp=... msg="..." k=v ...`.
 * Callers pass only names, numbers and ids: never tokens, keys or message bodies. */
#ifndef KL_LOG_H
#define KL_LOG_H

typedef enum { KL_LOG_DEBUG, KL_LOG_INFO, KL_LOG_WARN, KL_LOG_ERROR } kl_log_level;

void kl_log_set_component(const char *component);
void kl_log_set_level(kl_log_level level);
/* fmt is the rest of the line after msg, as k=v pairs. */
void kl_log(kl_log_level level, const char *msg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define KL_DEBUG(msg, ...) kl_log(KL_LOG_DEBUG, msg, __VA_ARGS__)
#define KL_INFO(msg, ...) kl_log(KL_LOG_INFO, msg, __VA_ARGS__)
#define KL_WARN(msg, ...) kl_log(KL_LOG_WARN, msg, __VA_ARGS__)
#define KL_ERROR(msg, ...) kl_log(KL_LOG_ERROR, msg, __VA_ARGS__)

#endif
