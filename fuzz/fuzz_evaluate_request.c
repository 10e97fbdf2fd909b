/*
 * Fuzzes the function runner's request decoding: the protobuf
 * EvaluateFunctionRequest (as the service unpacks it from a gRPC message),
 * then the ResourceList inside it through the shipped set-namespace builtin,
 * which parses it as YAML or JSON. A decoded request must re-encode to a
 * message that decodes again with the same ResourceList. (Strings may come
 * back shorter: protobuf-c keeps them NUL-terminated, so an embedded NUL
 * cuts them, which is harmless for image names and paths. And protobuf-c
 * keeps unknown fields, even an invalid field number 0 that it then cannot
 * re-encode decodably: the round trip is only checked without them.)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "evaluator.pb-c.h"
#include "fnrunner/evaluator.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Evaluator__EvaluateFunctionRequest *req =
        evaluator__evaluate_function_request__unpack(NULL, size, data);
    if (!req)
        return 0;
    size_t n = evaluator__evaluate_function_request__get_packed_size(req);
    uint8_t *again = req->base.n_unknown_fields ? NULL : malloc(n ? n : 1);
    if (again) {
        evaluator__evaluate_function_request__pack(req, again);
        Evaluator__EvaluateFunctionRequest *back =
            evaluator__evaluate_function_request__unpack(NULL, n, again);
        if (!back || strcmp(back->image, req->image) != 0 ||
            back->resource_list.len != req->resource_list.len ||
            (req->resource_list.len &&
             memcmp(back->resource_list.data, req->resource_list.data, req->resource_list.len)))
            abort(); /* the round trip lost something */
        evaluator__evaluate_function_request__free_unpacked(back, NULL);
        free(again);
    }
    char *out = NULL, *log = NULL;
    size_t out_len = 0, log_len = 0;
    funcd_builtin_set_namespace((const char *)req->resource_list.data, req->resource_list.len, &out,
                                &out_len, &log, &log_len, NULL);
    free(out);
    free(log);
    evaluator__evaluate_function_request__free_unpacked(req, NULL);
    return 0;
}
