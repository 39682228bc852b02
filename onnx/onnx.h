/*
 * onnx.h - ONNX models (onnx.ModelProto, the .onnx files that torch.onnx.export and other
 * exporters write) as rtx graphs: the one public header of onnx/.
 *
 * A model is loaded once (rtx_onnx_load_file / rtx_onnx_load_buffer): the protobuf is parsed
 * with protobuf-c (onnx.proto from Debian's libonnx-dev, generated at build time), its
 * initializers become host tensors (inline raw_data or typed fields, or external data files
 * beside the model), its opset imports are checked (ai.onnx 13 to 23) and every node's op is
 * checked against the importer's table: an unsupported model fails the load with every
 * unsupported op listed (type, node name, opset), never later.
 *
 * A loaded model is then instantiated for concrete input shapes (rtx_onnx_instantiate): the
 * ONNX graph is lowered node by node to rtx ops with every dimension known, so symbolic
 * dimensions (a dynamic batch) are resolved and shape sub-graphs (Shape -> Gather -> Concat
 * -> Reshape) fold to constants; nodes whose inputs are all constant are computed once on the
 * CPU at instantiation; decomposed patterns (layer norm, GELU, attention) become the fused
 * rtx ops. The result is an ordinary rtx graph whose inputs are the model's graph inputs (in
 * order, initializers excluded) and whose outputs are its graph outputs (in order); weights
 * are shared by reference between the model and every graph made from it.
 *
 * Everything here is thread-safe for distinct models; one model may be instantiated from
 * several threads at once (instantiation only reads it).
 */
#ifndef RTX_ONNX_H
#define RTX_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ai.onnx opsets the importer reads (ModelProto.opset_import). */
#define RTX_ONNX_OPSET_MIN 13
#define RTX_ONNX_OPSET_MAX 23

struct rtx_onnx_model;

/* A graph input or output of the model. dims[d] is -1 for a symbolic or unknown dimension
 * (dim_param names it, or "" when the model gives no name); ndim is -1 when the model does
 * not give the rank (outputs only). */
struct rtx_onnx_io {
    const char *name;
    enum rtx_dtype dtype;
    int ndim;
    int64_t dims[RTX_MAX_DIMS];
    const char *dim_params[RTX_MAX_DIMS];
};

/* Loads an .onnx file. External data (TensorProto.data_location EXTERNAL) is read from files
 * relative to the model's directory, never outside it. Every problem names the file: missing
 * or malformed protobuf (RTX_EFORMAT), an opset or op the importer lacks (RTX_EUNSUPPORTED,
 * listing every such op), an initializer whose data does not match its type and shape
 * (RTX_EFORMAT), limits (RTX_ELIMIT). lim may be NULL (rtx_limits_default). */
int rtx_onnx_load_file(const char *path, const struct rtx_limits *lim,
                       struct rtx_onnx_model **out, struct rtx_err *err);
/* As rtx_onnx_load_file from bytes in memory (copied as needed: data may be freed after the
 * call). base_dir is the directory external data is read from; NULL refuses a model with
 * external data. what names the bytes in messages ("model.onnx", "the job's onnx_model"). */
int rtx_onnx_load_buffer(const void *data, size_t len, const char *base_dir, const char *what,
                         const struct rtx_limits *lim, struct rtx_onnx_model **out,
                         struct rtx_err *err);
void rtx_onnx_free(struct rtx_onnx_model *m); /* NULL is a no-op */

/* The model's graph inputs (initializers excluded) and outputs, in the model's order. */
int rtx_onnx_n_inputs(const struct rtx_onnx_model *m);
int rtx_onnx_n_outputs(const struct rtx_onnx_model *m);
const struct rtx_onnx_io *rtx_onnx_input(const struct rtx_onnx_model *m, int i);
const struct rtx_onnx_io *rtx_onnx_output(const struct rtx_onnx_model *m, int i);
/* The graph's name ("" when none), the ai.onnx opset and the model's producer
 * ("pytorch 2.11.0", "" when none). */
const char *rtx_onnx_graph_name(const struct rtx_onnx_model *m);
int rtx_onnx_opset(const struct rtx_onnx_model *m);
const char *rtx_onnx_producer(const struct rtx_onnx_model *m);
/* Bytes of the initializers (what the model holds in host memory). */
int64_t rtx_onnx_weight_bytes(const struct rtx_onnx_model *m);

/* Lowers the model to an rtx graph for these inputs (inputs[i] describes model input i; only
 * dtype and shape are read; n must equal rtx_onnx_n_inputs). Wrong dtypes or shapes against
 * the model's declarations give RTX_EINVAL naming the input and dimension; a node the
 * importer cannot lower for these shapes (a Reshape whose shape is computed from data, say)
 * gives RTX_EUNSUPPORTED naming the node; a constant computation that fails gives its error
 * naming the node. The graph is validated and its shapes inferred for these inputs. */
int rtx_onnx_instantiate(const struct rtx_onnx_model *m, const struct rtx_tensor *const *inputs,
                         int n, const struct rtx_limits *lim, struct rtx_graph **out,
                         struct rtx_err *err);

/* The ONNX ops the importer lowers, as "Name" strings in name order (for docs and rtxctl);
 * returns the count and sets *names to a static table. */
int rtx_onnx_supported_ops(const char *const **names);

#ifdef __cplusplus
}
#endif
#endif /* RTX_ONNX_H */
