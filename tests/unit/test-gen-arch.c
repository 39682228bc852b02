/*
 * test-gen-arch.c - decoder checkpoints (generation/arch-config.c, arch-weights.c,
 * arch-graph.c, model.c): config.json of GPT-2, Llama, Mistral and Qwen2 with transformers'
 * defaults, rope scaling's inverse frequencies against values transformers computed, every
 * refusal naming its field; a tiny Llama checkpoint written here (bf16 safetensors, a small
 * tokenizer.json) loaded, its weights as views of the mapping or converted, its step graph
 * built, prompts encoded with BOS, and the whole load under failing allocations. Logits
 * against a reference are tests/interop/test_gen_arch.py's.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "generation/arch-impl.h"
#include "generation/generation.h"

/* ------------------------------------------------------------------------------------------
 * config.json
 * ---------------------------------------------------------------------------------------- */

static const char llama_cfg[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\","
    " \"hidden_size\": 4096, \"intermediate_size\": 14336, \"num_hidden_layers\": 32,"
    " \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"vocab_size\": 128256,"
    " \"max_position_embeddings\": 131072, \"rms_norm_eps\": 1e-05, \"rope_theta\": 500000.0,"
    " \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
    " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
    " \"torch_dtype\": \"bfloat16\", \"bos_token_id\": 128000,"
    " \"eos_token_id\": [128001, 128008, 128009], \"tie_word_embeddings\": false}";

static int parse(const char *json, struct rtx_gen_arch *a, struct rtx_err *err) {
    return rtx__gen_arch_parse(json, strlen(json), "config.json", a, err);
}

/* json with the top-level fields of patch (an object) replaced; null removes a field. */
static char *patched(const char *json, const char *patch) {
    json_t *doc = json_loads(json, 0, NULL), *p = json_loads(patch, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    ck_assert_ptr_nonnull(p);
    const char *k;
    json_t *v;
    json_object_foreach(p, k, v) {
        if (json_is_null(v))
            json_object_del(doc, k);
        else
            json_object_set(doc, k, v);
    }
    char *s = json_dumps(doc, 0);
    json_decref(doc);
    json_decref(p);
    return s;
}

/* Parsing json patched with patch fails with code and a message containing want. */
static void refused(const char *json, const char *patch, int code, const char *want) {
    char *s = patched(json, patch);
    struct rtx_gen_arch a;
    struct rtx_err err = {0};
    int rc = parse(s, &a, &err);
    ck_assert_msg(rc == code && strstr(err.msg, want), "%s: got %d '%s', want %d '%s'", patch, rc,
                  err.msg, code, want);
    free(s);
}

START_TEST(gen_arch_parses_llama3) {
    struct rtx_gen_arch a;
    struct rtx_err err = {0};
    ck_assert_int_eq(parse(llama_cfg, &a, &err), 0);
    ck_assert_int_eq(a.kind, RTX_GEN_ARCH_LLAMA);
    ck_assert_int_eq(a.n_layers, 32);
    ck_assert_int_eq(a.hidden, 4096);
    ck_assert_int_eq(a.n_heads, 32);
    ck_assert_int_eq(a.n_kv_heads, 8);
    ck_assert_int_eq(a.head_dim, 128);
    ck_assert_int_eq(a.intermediate, 14336);
    ck_assert_int_eq(a.vocab, 128256);
    ck_assert_int_eq(a.max_positions, 131072);
    ck_assert_double_eq(a.norm_eps, 1e-5);
    ck_assert_double_eq(a.rope_theta, 500000.0);
    ck_assert_str_eq(a.rope_type, "llama3");
    ck_assert_int_eq(a.rope_original_max, 8192);
    ck_assert_int_eq(a.dtype, RTX_BF16);
    ck_assert(!a.tie_embeddings && !a.qkv_bias && !a.mlp_bias);
    ck_assert_str_eq(a.hidden_act, "silu");
    ck_assert_int_eq(a.bos_id, 128000);
    ck_assert_int_eq(a.n_eos, 3);
    ck_assert_int_eq(a.eos_ids[2], 128009);
}
END_TEST

/* Llama 3.1's inverse frequencies as transformers 5.24 computes them (float32, CPU). */
START_TEST(gen_arch_llama3_inv_freq_matches_transformers) {
    static const struct {
        int i;
        float v;
    } want[] = {{0, 1.0f},
                {10, 0.12868738174438477f},
                {20, 0.016560440883040428f},
                {25, 0.005940730683505535f}, /* medium: smoothed */
                {30, 0.0013718936825171113f},
                {35, 9.556212171446532e-05f},
                {40, 3.428102354519069e-05f}, /* low: divided by the factor */
                {50, 4.411534519022098e-06f},
                {63, 3.068925877869333e-07f}};
    struct rtx_gen_arch a;
    ck_assert_int_eq(parse(llama_cfg, &a, NULL), 0);
    float inv[64];
    rtx__gen_arch_inv_freq(&a, inv);
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        float got = inv[want[k].i], w = want[k].v;
        ck_assert_msg(fabsf(got - w) <= 2 * (nextafterf(w, INFINITY) - w),
                      "inv_freq[%d] %.9g, want %.9g", want[k].i, got, w);
    }
}
END_TEST

START_TEST(gen_arch_linear_and_default_inv_freq) {
    /* transformers: head_dim 16, theta 10000, linear factor 4 */
    static const float linear[8] = {0.25f,
                                    0.07905694097280502f,
                                    0.02500000037252903f,
                                    0.007905694656074047f,
                                    0.0024999999441206455f,
                                    0.0007905694656074047f,
                                    0.0002500000118743628f,
                                    7.905694656074047e-05f};
    const char *cfg =
        "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,"
        " \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 10,"
        " \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0}}";
    struct rtx_gen_arch a;
    struct rtx_err err = {0};
    ck_assert_int_eq(parse(cfg, &a, &err), 0);
    ck_assert_str_eq(a.rope_type, "linear");
    float inv[8];
    rtx__gen_arch_inv_freq(&a, inv);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(fabsf(inv[i] - linear[i]) <= 2e-7f * linear[i], "%d: %.9g", i, inv[i]);
    /* the defaults: kv heads = heads, head_dim = hidden / heads, theta 10000, eps 1e-6,
     * context 2048, untied, dtype not said */
    char *plain = patched(cfg, "{\"rope_scaling\": null}");
    ck_assert_int_eq(parse(plain, &a, &err), 0);
    free(plain);
    ck_assert_int_eq(a.n_kv_heads, 4);
    ck_assert_int_eq(a.head_dim, 16);
    ck_assert_double_eq(a.rope_theta, 10000.0);
    ck_assert_double_eq(a.norm_eps, 1e-6);
    ck_assert_int_eq(a.max_positions, 2048);
    ck_assert_int_eq(a.dtype, RTX_DTYPE_COUNT);
    ck_assert_str_eq(a.rope_type, "default");
    ck_assert_int_eq(a.bos_id, -1);
    ck_assert_int_eq(a.n_eos, 0);
    rtx__gen_arch_inv_freq(&a, inv);
    for (int i = 0; i < 8; i++)
        ck_assert_float_eq(inv[i], (float)(1.0 / pow(10000.0, i / 8.0)));
}
END_TEST

START_TEST(gen_arch_parses_gpt2_qwen2_mistral) {
    struct rtx_gen_arch a;
    struct rtx_err err = {0};
    const char *gpt2 =
        "{\"architectures\": [\"GPT2LMHeadModel\"], \"n_embd\": 768, \"n_head\": 12,"
        " \"n_layer\": 12, \"n_positions\": 1024, \"n_inner\": null,"
        " \"vocab_size\": 50257, \"bos_token_id\": 50256, \"eos_token_id\": 50256,"
        " \"activation_function\": \"gelu_new\"}";
    ck_assert_int_eq(parse(gpt2, &a, &err), 0);
    ck_assert_int_eq(a.kind, RTX_GEN_ARCH_GPT2);
    ck_assert_int_eq(a.intermediate, 3072);
    ck_assert_int_eq(a.head_dim, 64);
    ck_assert_int_eq(a.n_kv_heads, 12);
    ck_assert(a.tie_embeddings && a.qkv_bias);
    ck_assert_double_eq(a.norm_eps, 1e-5);
    ck_assert_int_eq(a.max_positions, 1024);
    ck_assert_int_eq(a.n_eos, 1);

    const char *qwen = "{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 896,"
                       " \"intermediate_size\": 4864, \"num_hidden_layers\": 24,"
                       " \"num_attention_heads\": 14, \"num_key_value_heads\": 2,"
                       " \"vocab_size\": 151936, \"max_position_embeddings\": 32768,"
                       " \"rope_theta\": 1000000.0, \"sliding_window\": 4096,"
                       " \"use_sliding_window\": false, \"tie_word_embeddings\": true,"
                       " \"torch_dtype\": \"bfloat16\", \"eos_token_id\": 151643}";
    ck_assert_int_eq(parse(qwen, &a, &err), 0);
    ck_assert_int_eq(a.kind, RTX_GEN_ARCH_QWEN2);
    ck_assert(a.qkv_bias && !a.mlp_bias && a.tie_embeddings);
    ck_assert_int_eq(a.head_dim, 64);
    ck_assert_int_eq(a.max_positions, 32768); /* the window is off */
    char *windowed = patched(qwen, "{\"use_sliding_window\": true}");
    ck_assert_int_eq(parse(windowed, &a, &err), 0);
    free(windowed);
    ck_assert_int_eq(a.max_positions, 4096); /* full attention within the window */

    char *mistral = patched(llama_cfg, "{\"architectures\": [\"MistralForCausalLM\"],"
                                       " \"sliding_window\": 4096, \"rope_scaling\": null,"
                                       " \"head_dim\": 64}");
    ck_assert_int_eq(parse(mistral, &a, &err), 0);
    free(mistral);
    ck_assert_int_eq(a.kind, RTX_GEN_ARCH_LLAMA);
    ck_assert_int_eq(a.max_positions, 4096);
    ck_assert_int_eq(a.head_dim, 64); /* given, not hidden / heads */

    /* model_type alone; transformers 5's rope_parameters and dtype */
    char *v5 = patched(llama_cfg, "{\"architectures\": null, \"rope_scaling\": null,"
                                  " \"torch_dtype\": null, \"dtype\": \"float16\","
                                  " \"rope_parameters\": {\"rope_type\": \"default\","
                                  " \"rope_theta\": 250000.0}}");
    ck_assert_int_eq(parse(v5, &a, &err), 0);
    free(v5);
    ck_assert_int_eq(a.kind, RTX_GEN_ARCH_LLAMA);
    ck_assert_double_eq(a.rope_theta, 250000.0);
    ck_assert_int_eq(a.dtype, RTX_F16);
}
END_TEST

static const char gpt2_cfg[] = "{\"model_type\": \"gpt2\", \"n_embd\": 64, \"n_head\": 4,"
                               " \"n_layer\": 1, \"n_positions\": 16, \"vocab_size\": 10}";

/* A base config (1: GPT-2's), the fields changed, the refusal and a part of its message. */
static const struct {
    int gpt2;
    const char *patch;
    int code;
    const char *want;
} bad_configs[] = {
    {0, "{\"num_attention_heads\": 48, \"num_key_value_heads\": 8}", RTX_EFORMAT,
     "num_attention_heads (48) does not divide hidden_size (4096)"},
    {0, "{\"num_key_value_heads\": 5}", RTX_EFORMAT,
     "num_key_value_heads (5) does not divide num_attention_heads (32)"},
    {0, "{\"architectures\": [\"BertModel\"]}", RTX_EUNSUPPORTED,
     "architectures[0] 'BertModel' is not supported"},
    {0, "{\"architectures\": null, \"model_type\": \"t5\"}", RTX_EUNSUPPORTED,
     "model_type 't5' is not supported"},
    {0, "{\"architectures\": null, \"model_type\": null}", RTX_EFORMAT,
     "neither architectures nor model_type"},
    {0, "{\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}}", RTX_EUNSUPPORTED,
     "rope_scaling.rope_type 'dynamic' is not supported"},
    {0, "{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 2.0}}", RTX_EUNSUPPORTED,
     "rope_scaling.type 'yarn'"},
    {0, "{\"rope_scaling\": {\"rope_type\": \"linear\"}}", RTX_EFORMAT,
     "rope_scaling.factor is missing"},
    {0,
     "{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
     " \"low_freq_factor\": 4.0, \"high_freq_factor\": 1.0}}",
     RTX_EFORMAT, "high_freq_factor (1) must exceed low_freq_factor (4)"},
    {0, "{\"rope_scaling\": 3}", RTX_EFORMAT, "rope_scaling must be an object"},
    {0, "{\"hidden_size\": null}", RTX_EFORMAT, "hidden_size is missing"},
    {0, "{\"hidden_size\": \"big\"}", RTX_EFORMAT, "hidden_size must be an integer"},
    {0, "{\"vocab_size\": 0}", RTX_EFORMAT, "vocab_size is 0, expected 1.."},
    {0, "{\"rms_norm_eps\": -1}", RTX_EFORMAT, "rms_norm_eps is -1"},
    {0, "{\"head_dim\": 33}", RTX_EFORMAT, "head size 33 is odd"},
    {0, "{\"hidden_act\": \"gelu\"}", RTX_EUNSUPPORTED, "hidden_act 'gelu' is not supported"},
    {0, "{\"tie_word_embeddings\": 1}", RTX_EFORMAT, "tie_word_embeddings must be true or false"},
    {0, "{\"torch_dtype\": \"float64\"}", RTX_EUNSUPPORTED,
     "torch_dtype 'float64' is not supported"},
    {0, "{\"eos_token_id\": [1, \"x\"]}", RTX_EFORMAT,
     "eos_token_id must be a token id or a list of token ids"},
    {0, "{\"eos_token_id\": [1, 2, 3, 4, 5, 6, 7, 8, 9]}", RTX_EUNSUPPORTED, "more than 8 ids"},
    {1, "{\"n_head\": 5}", RTX_EFORMAT, "n_head (5) does not divide n_embd (64)"},
    {1, "{\"scale_attn_by_inverse_layer_idx\": true}", RTX_EUNSUPPORTED,
     "scale_attn_by_inverse_layer_idx"},
    {1, "{\"activation_function\": \"swiglu\"}", RTX_EUNSUPPORTED, "activation_function 'swiglu'"},
    {1, "{\"n_positions\": null}", RTX_EFORMAT, "n_positions is missing"},
};

START_TEST(gen_arch_refuses_bad_configs_by_field) {
    for (size_t i = 0; i < sizeof bad_configs / sizeof bad_configs[0]; i++)
        refused(bad_configs[i].gpt2 ? gpt2_cfg : llama_cfg, bad_configs[i].patch,
                bad_configs[i].code, bad_configs[i].want);
    struct rtx_gen_arch a;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx__gen_arch_parse("{\"model_type\": ", 15, "x/config.json", &a, &err),
                     RTX_EFORMAT);
    ck_assert_msg(strstr(err.msg, "x/config.json: line 1"), "%s", err.msg);
    ck_assert_int_eq(parse("[1, 2]", &a, &err), RTX_EFORMAT);
    ck_assert_msg(strstr(err.msg, "expected a JSON object"), "%s", err.msg);
}
END_TEST

/* ------------------------------------------------------------------------------------------
 * A tiny checkpoint on disk
 * ---------------------------------------------------------------------------------------- */

#define H 8     /* hidden */
#define NH 2    /* heads of 4 */
#define NKV 1   /* one KV head */
#define FF 12   /* intermediate */
#define VOCAB 9 /* the tokenizer's 7 ids, two more in the embedding */

static const char tiny_tokenizer[] =
    "{\"version\": \"1.0\", \"added_tokens\": ["
    "{\"id\": 5, \"content\": \"<s>\", \"single_word\": false, \"lstrip\": false,"
    " \"rstrip\": false, \"normalized\": false, \"special\": true},"
    "{\"id\": 6, \"content\": \"</s>\", \"single_word\": false, \"lstrip\": false,"
    " \"rstrip\": false, \"normalized\": false, \"special\": true}],"
    " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\","
    " \"add_prefix_space\": false, \"use_regex\": true}, \"post_processor\": null,"
    " \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"dropout\": null,"
    " \"vocab\": {\"h\": 0, \"e\": 1, \"l\": 2, \"o\": 3, \"he\": 4}, \"merges\": [\"h e\"]}}";

static void write_file(const char *dir, const char *name, const void *data, size_t len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* The value of element i of every tensor: small multiples of 1/16, exact in bf16. */
static float tiny_value(int64_t i) {
    return (float)((i * 37) % 19 - 9) / 16.0f;
}

/* model.safetensors (bf16) with the tensors of a one-layer Llama, leaving out `skip`. */
static void write_weights(const char *dir, const char *skip) {
    static const struct {
        const char *name;
        int64_t d0, d1;
    } t[] = {{"model.embed_tokens.weight", VOCAB, H},
             {"model.layers.0.input_layernorm.weight", H, 0},
             {"model.layers.0.self_attn.q_proj.weight", NH * 4, H},
             {"model.layers.0.self_attn.k_proj.weight", NKV * 4, H},
             {"model.layers.0.self_attn.v_proj.weight", NKV * 4, H},
             {"model.layers.0.self_attn.o_proj.weight", H, NH * 4},
             {"model.layers.0.post_attention_layernorm.weight", H, 0},
             {"model.layers.0.mlp.gate_proj.weight", FF, H},
             {"model.layers.0.mlp.up_proj.weight", FF, H},
             {"model.layers.0.mlp.down_proj.weight", H, FF},
             {"model.norm.weight", H, 0},
             {"lm_head.weight", VOCAB, H},
             {"model.layers.0.self_attn.rotary_emb.inv_freq", 2, 0}}; /* unused: ignored */
    json_t *hdr = json_object();
    size_t off = 0, n = sizeof t / sizeof t[0];
    for (size_t i = 0; i < n; i++) {
        if (skip && !strcmp(skip, t[i].name)) continue;
        size_t bytes = 2 * (size_t)(t[i].d0 * (t[i].d1 ? t[i].d1 : 1));
        json_t *shape =
            t[i].d1 ? json_pack("[I, I]", t[i].d0, t[i].d1) : json_pack("[I]", t[i].d0);
        json_object_set_new(hdr, t[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", "BF16", "shape", shape,
                                      "data_offsets", (json_int_t)off, (json_int_t)(off + bytes)));
        off += bytes;
    }
    char *h = json_dumps(hdr, JSON_COMPACT);
    size_t hlen = strlen(h), pad = (8 - (8 + hlen) % 8) % 8, total = 8 + hlen + pad + off;
    uint8_t *buf = calloc(1, total);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((hlen + pad) >> (8 * i));
    memcpy(buf + 8, h, hlen);
    memset(buf + 8 + hlen, ' ', pad);
    uint16_t *data = (uint16_t *)(buf + 8 + hlen + pad);
    for (size_t i = 0; i < off / 2; i++)
        data[i] = rtx_f32_to_bf16(tiny_value((int64_t)i));
    write_file(dir, "model.safetensors", buf, total);
    free(buf);
    free(h);
    json_decref(hdr);
}

static char tiny_dir[64];

static void tiny_setup(void) {
    snprintf(tiny_dir, sizeof tiny_dir, "/tmp/rtx-gen-arch-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tiny_dir));
    char cfg[512];
    int n = snprintf(cfg, sizeof cfg,
                     "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": %d,"
                     " \"intermediate_size\": %d, \"num_hidden_layers\": 1,"
                     " \"num_attention_heads\": %d, \"num_key_value_heads\": %d,"
                     " \"vocab_size\": %d, \"max_position_embeddings\": 64,"
                     " \"torch_dtype\": \"bfloat16\", \"eos_token_id\": 6}",
                     H, FF, NH, NKV, VOCAB);
    write_file(tiny_dir, "config.json", cfg, (size_t)n);
    write_file(tiny_dir, "tokenizer.json", tiny_tokenizer, strlen(tiny_tokenizer));
    const char *tc = "{\"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"</s>\","
                     " \"chat_template\": [{\"name\": \"default\", \"template\": \"T\"}]}";
    write_file(tiny_dir, "tokenizer_config.json", tc, strlen(tc));
    const char *gc = "{\"eos_token_id\": [6, 7], \"top_k\": 5, \"do_sample\": false}";
    write_file(tiny_dir, "generation_config.json", gc, strlen(gc));
    write_weights(tiny_dir, NULL);
}

static void tiny_teardown(void) {
    static const char *const files[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                        "generation_config.json", "model.safetensors"};
    char path[512];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", tiny_dir, files[i]);
        unlink(path);
    }
    rmdir(tiny_dir);
}

START_TEST(gen_model_loads_the_checkpoint) {
    struct rtx_gen_model *m;
    struct rtx_err err = {0};
    ck_assert_msg(rtx_gen_model_load(tiny_dir, NULL, &m, &err) == 0, "%s", err.msg);
    const struct rtx_gen_arch *a = rtx__gen_model_arch(m);
    ck_assert_str_eq(rtx_gen_model_arch_name(m), "llama");
    ck_assert_str_eq(rtx__gen_model_dir(m), tiny_dir);
    ck_assert_int_eq(a->dtype, RTX_BF16);
    ck_assert_int_eq(rtx_gen_model_context_length(m), 64);
    ck_assert_int_eq(a->bos_id, 5);
    ck_assert_int_eq(a->n_eos, 2); /* 6 (config, tokenizer_config, generation_config), 7 */
    ck_assert(rtx_gen_model_has_chat_template(m));
    ck_assert_int_eq(rtx__gen_model_compute_dtype(m, false), RTX_F32);
    ck_assert_int_eq(rtx__gen_model_compute_dtype(m, true), RTX_BF16);
    int64_t elems = VOCAB * H * 2 + H * 3 + (NH * 4 + 2 * NKV * 4) * H + H * NH * 4 + 3 * FF * H;
    ck_assert_int_eq(rtx_gen_model_weight_bytes(m, false), elems * 4);
    ck_assert_int_eq(rtx_gen_model_weight_bytes(m, true), elems * 2);

    struct rtx_gen_params p;
    rtx_gen_model_default_params(m, &p);
    ck_assert_double_eq(p.temperature, 0); /* do_sample false */
    ck_assert_int_eq(p.top_k, 5);
    ck_assert_double_eq(p.top_p, 1);
    ck_assert_int_eq(p.max_tokens, 16);
    ck_assert_int_eq(p.logprobs, -1);
    ck_assert(p.skip_special);
    ck_assert_str_eq(rtx_gen_finish_name(RTX_GEN_FINISH_STOP), "stop");
    ck_assert_str_eq(rtx_gen_finish_name(RTX_GEN_FINISH_LENGTH), "length");
    ck_assert_str_eq(rtx_gen_finish_name(RTX_GEN_FINISH_NONE), "");

    /* BOS: Llama's convention (tokenizer_config says nothing), not doubled */
    int32_t *ids;
    int n;
    ck_assert_int_eq(rtx_gen_model_encode_prompt(m, "hello", 5, &ids, &n, &err), 0);
    ck_assert_int_eq(n, 5);
    ck_assert_int_eq(ids[0], 5);
    ck_assert_int_eq(ids[1], 4);
    rtx_free(ids);
    ck_assert_int_eq(rtx_gen_model_encode_prompt(m, "<s>he", 5, &ids, &n, &err), 0);
    ck_assert_int_eq(n, 2);
    rtx_free(ids);
    ck_assert_int_eq(rtx_gen_model_encode_prompt(m, "\xff", 1, &ids, &n, &err), RTX_EINVAL);

    /* weights: the step graph's order; in bf16 views of the mapping, in f32 converted */
    struct rtx_gen_weights w16, w16b, w32;
    ck_assert_int_eq(rtx__gen_model_weights(m, RTX_BF16, &w16, &err), 0);
    ck_assert_int_eq(rtx__gen_model_weights(m, RTX_BF16, &w16b, &err), 0);
    ck_assert_int_eq(rtx__gen_model_weights(m, RTX_F32, &w32, &err), 0);
    ck_assert_int_eq(w16.n, 12);
    ck_assert_str_eq(w16.names[0], "embed");
    ck_assert_str_eq(w16.names[1], "layers.0.attn_norm");
    ck_assert_str_eq(w16.names[2], "layers.0.wq");
    ck_assert_str_eq(w16.names[11], "lm_head");
    ck_assert_int_eq(w16.bytes * 2, w32.bytes);
    for (int i = 0; i < w16.n; i++) {
        ck_assert_ptr_eq(rtx_tensor_data(w16.t[i]), rtx_tensor_data(w16b.t[i]));
        ck_assert_int_eq(w32.t[i]->dtype, RTX_F32);
        for (int64_t j = 0; j < rtx_tensor_numel(w32.t[i]); j++)
            ck_assert_double_eq(rtx_tensor_get(w32.t[i], j), rtx_tensor_get(w16.t[i], j));
    }
    ck_assert_double_eq(rtx_tensor_get(w32.t[0], 3), tiny_value(3));
    rtx__gen_weights_clear(&w16b);
    ck_assert_int_eq(rtx__gen_model_weights(m, RTX_I32, &w16b, &err), RTX_EINVAL);

    /* the model outlives a reference dropped by another holder */
    struct rtx_gen_model *m2 = rtx_gen_model_ref(m);
    rtx_gen_model_unref(m);
    ck_assert_int_eq(rtx_gen_model_context_length(m2), 64);
    rtx_gen_model_unref(m2);
    rtx_gen_model_unref(NULL);
    /* weights outlive the model (they hold the mapping) */
    ck_assert_double_eq(rtx_tensor_get(w16.t[0], 3), tiny_value(3));
    rtx__gen_weights_clear(&w16);
    rtx__gen_weights_clear(&w32);
}
END_TEST

START_TEST(gen_model_refuses_a_missing_tensor) {
    write_weights(tiny_dir, "model.layers.0.mlp.up_proj.weight");
    struct rtx_gen_model *m = NULL;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_gen_model_load(tiny_dir, NULL, &m, &err), RTX_EFORMAT);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err.msg, "model.safetensors: tensor 'model.layers.0.mlp.up_proj.weight'"
                                  " is missing"),
                  "%s", err.msg);
}
END_TEST

START_TEST(gen_model_chat_template_override) {
    struct rtx_gen_model *m;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_gen_model_load(tiny_dir, "{{ messages }}", &m, &err), 0);
    ck_assert(rtx_gen_model_has_chat_template(m));
    rtx_gen_model_unref(m);
    const char *tc = "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}],"
                     " \"add_bos_token\": false}";
    write_file(tiny_dir, "tokenizer_config.json", tc, strlen(tc));
    ck_assert_int_eq(rtx_gen_model_load(tiny_dir, NULL, &m, &err), 0);
    ck_assert(!rtx_gen_model_has_chat_template(m)); /* no template named default */
    int32_t *ids;
    int n;
    ck_assert_int_eq(rtx_gen_model_encode_prompt(m, "hello", 5, &ids, &n, &err), 0);
    ck_assert_int_eq(n, 4); /* add_bos_token false */
    rtx_free(ids);
    rtx_gen_model_unref(m);
}
END_TEST

/* Load, weights in f32 and the step graph, with the n-th allocation failing for every n
 * until all succeed: each failure is RTX_ENOMEM (or the graph's own refusal of a failed
 * allocation) and leaks nothing. */
START_TEST(gen_model_out_of_memory) {
    int rc = -1;
    for (long n = 1; n < 5000 && rc != 0; n++) {
        struct rtx_gen_model *m = NULL;
        struct rtx_gen_weights w = {0};
        struct rtx_graph *g = NULL;
        struct rtx_err err = {0};
        rtx_alloc_fail_after(n);
        rc = rtx_gen_model_load(tiny_dir, NULL, &m, &err);
        if (!rc) rc = rtx__gen_model_weights(m, RTX_F32, &w, &err);
        if (!rc) rc = rtx__gen_graph_build(rtx__gen_model_arch(m), &w, RTX_F32, 4, 16, &g, &err);
        rtx_alloc_fail_after(0);
        if (rc) ck_assert_msg(rc == RTX_ENOMEM, "n %ld: %d %s", n, rc, err.msg);
        rtx_graph_free(g);
        rtx__gen_weights_clear(&w);
        rtx_gen_model_unref(m);
    }
    ck_assert_int_eq(rc, 0);
}
END_TEST

START_TEST(gen_graph_has_the_step_inputs) {
    struct rtx_gen_model *m;
    struct rtx_err err = {0};
    ck_assert_int_eq(rtx_gen_model_load(tiny_dir, NULL, &m, &err), 0);
    struct rtx_gen_weights w;
    ck_assert_int_eq(rtx__gen_model_weights(m, RTX_BF16, &w, &err), 0);
    struct rtx_graph *g;
    ck_assert_msg(rtx__gen_graph_build(rtx__gen_model_arch(m), &w, RTX_BF16, 10, 16, &g, &err) ==
                      0,
                  "%s", err.msg);
    static const char *const step[] = {"ids",          "positions",   "slot_mapping",
                                       "block_tables", "query_start", "context_lens",
                                       "last_index",   "k_cache.0",   "v_cache.0"};
    ck_assert_int_eq(g->n_inputs, 9 + w.n);
    for (int i = 0; i < 9; i++)
        ck_assert_str_eq(g->values[g->inputs[i]].name, step[i]);
    const struct rtx_value *kc = &g->values[g->inputs[7]];
    ck_assert_int_eq(kc->dtype, RTX_BF16);
    ck_assert_int_eq(kc->dims[0], 10);
    ck_assert_int_eq(kc->dims[1], 16);
    ck_assert_int_eq(kc->dims[2], NKV);
    ck_assert_int_eq(kc->dims[3], 4);
    for (int i = 0; i < w.n; i++)
        ck_assert_str_eq(g->values[g->inputs[9 + i]].name, w.names[i]);
    ck_assert_int_eq(g->n_outputs, 2);
    ck_assert_str_eq(g->values[g->outputs[0]].name, "logits");
    ck_assert_str_eq(g->values[g->outputs[1]].name, "greedy");
    ck_assert_int_eq(rtx_graph_find_value(g, "inv_freq") >= 0, 1);
    rtx_graph_free(g);
    /* weights in another dtype than the graph's are refused */
    ck_assert_int_eq(rtx__gen_graph_build(rtx__gen_model_arch(m), &w, RTX_F32, 10, 16, &g, &err),
                     RTX_EINVAL);
    ck_assert_msg(strstr(err.msg, "weight 'embed' is bf16, expected f32"), "%s", err.msg);
    ck_assert_int_eq(rtx__gen_graph_build(rtx__gen_model_arch(m), &w, RTX_BF16, 0, 16, &g, &err),
                     RTX_EINVAL);
    rtx__gen_weights_clear(&w);
    rtx_gen_model_unref(m);
}
END_TEST

Suite *rtx_gen_arch_suite(void) {
    Suite *s = suite_create("gen_arch");
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, gen_arch_parses_llama3);
    tcase_add_test(tc, gen_arch_llama3_inv_freq_matches_transformers);
    tcase_add_test(tc, gen_arch_linear_and_default_inv_freq);
    tcase_add_test(tc, gen_arch_parses_gpt2_qwen2_mistral);
    tcase_add_test(tc, gen_arch_refuses_bad_configs_by_field);
    suite_add_tcase(s, tc);
    tc = tcase_create("model");
    tcase_add_checked_fixture(tc, tiny_setup, tiny_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, gen_model_loads_the_checkpoint);
    tcase_add_test(tc, gen_model_refuses_a_missing_tensor);
    tcase_add_test(tc, gen_model_chat_template_override);
    tcase_add_test(tc, gen_model_out_of_memory);
    tcase_add_test(tc, gen_graph_has_the_step_inputs);
    suite_add_tcase(s, tc);
    return s;
}
