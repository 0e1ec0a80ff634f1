/* args: the argument accessors of keyload-mcp's tool handlers (declared in mcp.h). Apart
 * from the tool machinery in tools.c, which calls the handlers, so that the handlers'
 * files and tools.c do not call each other. */
#include "client/mcp/mcp.h"

const char *mcp_arg_str(const json_t *args, const char *name)
{
    return json_string_value(json_object_get(args, name));
}

bool mcp_arg_int(const json_t *args, const char *name, int64_t *out)
{
    const json_t *v = json_object_get(args, name);
    if (!json_is_integer(v))
        return false;
    *out = json_integer_value(v);
    return true;
}

bool mcp_arg_null(const json_t *args, const char *name)
{
    return json_is_null(json_object_get(args, name));
}

bool mcp_arg_bool(const json_t *args, const char *name, bool dflt)
{
    const json_t *v = json_object_get(args, name);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

kl_code mcp_arg_b64(const json_t *args, const char *name, uint8_t **out, size_t *len,
                    kl_err *err)
{
    *out = NULL;
    *len = 0;
    const char *text = mcp_arg_str(args, name);
    if (text == NULL)
        return kl_fail(err, KL_INVALID_ARGUMENT, "usage", "argument %s is missing", name);
    if (kl_base64_decode(name, text, out, len, err) != KL_OK)
        return kl_fail(err, KL_INVALID_ARGUMENT, "usage",
                       "argument %s must be canonical base64 (standard alphabet, padded)", name);
    return KL_OK;
}
