/*
 * ops.c - the table of ONNX ops the importer lowers (op_type -> lowering function and its
 * argument), in name order; docs/onnx.md lists the same ops with what each supports.
 */
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx-impl.h"

#define OX_OPS(X)  \
    X(Abs, ox_lower_unary, "abs")                             \
    X(Add, ox_lower_binary, "add")                            \
    X(And, ox_lower_logic, "and")                             \
    X(ArgMax, ox_lower_argmax, NULL)                          \
    X(Attention, ox_lower_attention, NULL)                    \
    X(AveragePool, ox_lower_pool, "avg_pool2d")               \
    X(BatchNormalization, ox_lower_batchnorm, NULL)           \
    X(Cast, ox_lower_cast, NULL)                              \
    X(Clip, ox_lower_clip, NULL)                              \
    X(Concat, ox_lower_concat, NULL)                          \
    X(Constant, ox_lower_constant, NULL)                      \
    X(ConstantOfShape, ox_lower_constant_of_shape, NULL)      \
    X(Conv, ox_lower_conv, NULL)                              \
    X(CumSum, ox_lower_cumsum, NULL)                          \
    X(Div, ox_lower_binary, "div")                            \
    X(Dropout, ox_lower_identity, NULL)                       \
    X(Equal, ox_lower_binary, "equal")                        \
    X(Erf, ox_lower_unary, "erf")                             \
    X(Exp, ox_lower_unary, "exp")                             \
    X(Expand, ox_lower_expand, NULL)                          \
    X(Flatten, ox_lower_flatten, NULL)                        \
    X(Gather, ox_lower_gather, NULL)                          \
    X(GatherElements, ox_lower_gather_elements, NULL)         \
    X(GatherND, ox_lower_gather_nd, NULL)                     \
    X(Gelu, ox_lower_gelu, NULL)                              \
    X(Gemm, ox_lower_gemm, NULL)                              \
    X(GlobalAveragePool, ox_lower_global_pool, "reduce_mean") \
    X(GlobalMaxPool, ox_lower_global_pool, "reduce_max")      \
    X(Greater, ox_lower_binary, "greater")                    \
    X(GreaterOrEqual, ox_lower_compare, ">=")                 \
    X(HardSigmoid, ox_lower_hard_sigmoid, "sigmoid")          \
    X(HardSwish, ox_lower_hard_sigmoid, "swish")              \
    X(Identity, ox_lower_identity, NULL)                      \
    X(IsNaN, ox_lower_isnan, NULL)                            \
    X(LayerNormalization, ox_lower_layernorm, "layer_norm")   \
    X(LeakyRelu, ox_lower_leaky_relu, NULL)                   \
    X(Less, ox_lower_binary, "less")                          \
    X(LessOrEqual, ox_lower_compare, "<=")                    \
    X(Log, ox_lower_unary, "log")                             \
    X(LogSoftmax, ox_lower_softmax, "log_softmax")            \
    X(MatMul, ox_lower_matmul, NULL)                          \
    X(Max, ox_lower_variadic, "max")                          \
    X(MaxPool, ox_lower_pool, "max_pool2d")                   \
    X(Mean, ox_lower_variadic, "mean")                        \
    X(Min, ox_lower_variadic, "min")                          \
    X(Mul, ox_lower_binary, "mul")                            \
    X(Neg, ox_lower_unary, "neg")                             \
    X(Not, ox_lower_logic, "not")                             \
    X(Or, ox_lower_logic, "or")                               \
    X(Pad, ox_lower_pad, NULL)                                \
    X(Pow, ox_lower_binary, "pow")                            \
    X(RMSNormalization, ox_lower_layernorm, "rms_norm")     \
    X(Range, ox_lower_range, NULL)                            \
    X(Reciprocal, ox_lower_reciprocal, NULL)                  \
    X(ReduceMax, ox_lower_reduce, "reduce_max")               \
    X(ReduceMean, ox_lower_reduce, "reduce_mean")             \
    X(ReduceMin, ox_lower_reduce, "reduce_min")               \
    X(ReduceSum, ox_lower_reduce, "reduce_sum")               \
    X(Relu, ox_lower_unary, "relu")                           \
    X(Reshape, ox_lower_reshape, NULL)                        \
    X(Shape, ox_lower_shape, NULL)                            \
    X(Sigmoid, ox_lower_unary, "sigmoid")                     \
    X(Size, ox_lower_size, NULL)                              \
    X(Slice, ox_lower_slice, NULL)                            \
    X(Softmax, ox_lower_softmax, "softmax")                   \
    X(Split, ox_lower_split, NULL)                            \
    X(Sqrt, ox_lower_unary, "sqrt")                           \
    X(Squeeze, ox_lower_squeeze, "squeeze")                   \
    X(Sub, ox_lower_binary, "sub")                            \
    X(Sum, ox_lower_variadic, "sum")                          \
    X(Tanh, ox_lower_unary, "tanh")                           \
    X(Tile, ox_lower_tile, NULL)                              \
    X(Transpose, ox_lower_transpose, NULL)                    \
    X(Trilu, ox_lower_trilu, NULL)                            \
    X(Unsqueeze, ox_lower_squeeze, "unsqueeze")               \
    X(Where, ox_lower_where, NULL)

#define OX_ENTRY(name, fn, arg) {#name, fn, arg},
static const struct ox_op ops[] = {OX_OPS(OX_ENTRY)};
#define OX_NAME(name, fn, arg) #name,
static const char *const op_names[] = {OX_OPS(OX_NAME)};

#define N_OPS ((int)(sizeof ops / sizeof ops[0]))

static int cmp_op(const void *key, const void *entry) {
    return strcmp((const char *)key, ((const struct ox_op *)entry)->name);
}

const struct ox_op *rtx__onnx_op(const char *op_type) {
    return bsearch(op_type, ops, (size_t)N_OPS, sizeof ops[0], cmp_op);
}

int rtx_onnx_supported_ops(const char *const **names) {
    *names = op_names;
    return N_OPS;
}
