// Per op and per weight type: is a row computed in a batch of n bit-identical to the same row
// computed alone, on llama.cpp's CPU backend? The table in docs/benchmarks.md ("Exact output").
// It links against the ggml that llama-cpp-python's wheel ships, so it measures the kernels
// Tandem runs. Build and run (the wheel has the headers too):
//
//   S=$(echo $PWD/.venv/lib/python3*/site-packages) L=$S/llama_cpp/lib
//   cc -O2 -o /tmp/batch_invariance scripts/batch_invariance.c -I$S/include -L$L
//      -lggml-base -lggml-cpu -lggml -lm -Wl,-rpath,$L       (one command)
//   /tmp/batch_invariance [threads, default 2]
//
// Each line: an op and a weight type (plain, or repacked for this CPU: the CPU_REPACK buffer),
// with ggml's reference kernels off or on (use_ref, what exact output switches on); then for
// each batch size n, "=" when every row of the batch equals that row computed alone, "!" when
// not, and the largest difference.

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ggml_backend_t backend;
static ggml_backend_buffer_type_t repack_buft;

static const int NS[] = { 2, 3, 4, 5, 7, 8, 9, 13, 33 };
enum { N_NS = sizeof(NS) / sizeof(NS[0]), NMAX = 33 };

static float frand(void) { return (float) rand() / RAND_MAX * 2.0f - 1.0f; }

// Computes graph `gf` (its leaves already allocated by `ga`).
static void compute(struct ggml_cgraph * gf) { ggml_backend_graph_compute(backend, gf); }

// y = W x for the first n columns of x (M floats per column).
static float * mul_mat(struct ggml_tensor * W, const float * x, int n) {
    const int64_t K = W->ne[0], M = W->ne[1];
    struct ggml_init_params ip = { 16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * X = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, n);
    struct ggml_tensor * Y = ggml_mul_mat(ctx, W, X);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, Y);
    ggml_gallocr_t ga = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend));
    ggml_gallocr_alloc_graph(ga, gf);
    ggml_backend_tensor_set(X, x, 0, sizeof(float) * K * n);
    compute(gf);
    float * y = malloc(sizeof(float) * M * n);
    ggml_backend_tensor_get(Y, y, 0, sizeof(float) * M * n);
    ggml_gallocr_free(ga);
    ggml_free(ctx);
    return y;
}

static void report(const float * batch, const float * alone, int n, size_t row) {
    double maxd = 0;
    int same = memcmp(batch, alone, sizeof(float) * row * n) == 0;
    for (size_t i = 0; i < row * n; i++) {
        const double d = fabs(batch[i] - alone[i]);
        maxd = d > maxd ? d : maxd;
    }
    printf(" n=%d %s%.0e", n, same ? "=" : "!", maxd);
}

static void test_mul_mat(enum ggml_type type, int64_t K, int64_t M, int repack) {
    // (On x86 only Q4_0, Q4_K, IQ4_NL, MXFP4 and, with AVX-512, Q2_K have a repacked layout:
    // ggml-cpu/repack.cpp. Setting another type's data in that buffer is not supported.)
    if (repack && (!repack_buft || (type != GGML_TYPE_Q4_0 && type != GGML_TYPE_Q4_K))) {
        return;
    }
    struct ggml_init_params ip = { 4 * ggml_tensor_overhead(), NULL, true };
    struct ggml_context * wctx = ggml_init(ip);
    struct ggml_tensor * W = ggml_new_tensor_2d(wctx, type, K, M);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(
        wctx, repack ? repack_buft : ggml_backend_get_default_buffer_type(backend));
    float * wf = malloc(sizeof(float) * K * M);
    for (int64_t i = 0; i < K * M; i++) {
        wf[i] = frand() / sqrtf((float) K);
    }
    const size_t bytes = ggml_row_size(type, K) * M;
    void * wq = malloc(bytes);
    if (type == GGML_TYPE_F32) {
        memcpy(wq, wf, bytes);
    } else if (type == GGML_TYPE_F16) {
        for (int64_t i = 0; i < K * M; i++) {
            ((ggml_fp16_t *) wq)[i] = ggml_fp32_to_fp16(wf[i]);
        }
    } else {
        ggml_quantize_chunk(type, wf, wq, 0, M, K, NULL);
    }
    ggml_backend_tensor_set(W, wq, 0, bytes);
    float * x = malloc(sizeof(float) * K * NMAX);
    for (int64_t i = 0; i < K * NMAX; i++) {
        x[i] = frand();
    }
    for (int use_ref = 0; use_ref <= 1; use_ref++) {
        ggml_backend_cpu_set_use_ref(backend, use_ref);
        float * alone = malloc(sizeof(float) * M * NMAX);
        for (int j = 0; j < NMAX; j++) {
            float * y = mul_mat(W, x + K * j, 1);
            memcpy(alone + M * j, y, sizeof(float) * M);
            free(y);
        }
        printf("mul_mat %-5s %-8s use_ref=%d |", ggml_type_name(type), repack ? "repacked" : "plain", use_ref);
        for (int a = 0; a < N_NS; a++) {
            float * y = mul_mat(W, x, NS[a]);
            report(y, alone, NS[a], (size_t) M);
            free(y);
        }
        printf("\n");
        free(alone);
    }
    free(x);
    free(wf);
    free(wq);
    ggml_backend_buffer_free(buf);
    ggml_free(wctx);
}

// Attention of N queries (rows i0.., at positions p0 + i0..) over n_kv cached cells, the cells
// after each query's position masked: flash attention, or KQ, softmax, KQV as without it.
// Returns [N][H][D].
static float * attention(int fa, const float * q, const ggml_fp16_t * k, const ggml_fp16_t * v_rows,
                         const ggml_fp16_t * v_cols, int D, int H, int Hkv, int n_kv, int p0, int i0, int N) {
    struct ggml_init_params ip = { 32 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * Q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, N, H);
    struct ggml_tensor * Kt = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, D, n_kv, Hkv);
    struct ggml_tensor * V = fa ? ggml_new_tensor_3d(ctx, GGML_TYPE_F16, D, n_kv, Hkv) :
                                  ggml_new_tensor_3d(ctx, GGML_TYPE_F16, n_kv, D, Hkv);
    struct ggml_tensor * mask = ggml_new_tensor_2d(ctx, fa ? GGML_TYPE_F16 : GGML_TYPE_F32, n_kv, N);
    const float scale = 1.0f / sqrtf((float) D);
    struct ggml_tensor * out;
    if (fa) {
        out = ggml_flash_attn_ext(ctx, Q, Kt, V, mask, scale, 0.0f, 0.0f);
        ggml_prec_set_acc(out, GGML_PREC_F32);
    } else {
        struct ggml_tensor * kq = ggml_mul_mat(ctx, Kt, Q);
        ggml_prec_set_acc(kq, GGML_PREC_F32);
        kq = ggml_soft_max_ext(ctx, kq, mask, scale, 0.0f);
        out = ggml_mul_mat(ctx, V, kq);  // [D, N, H]
    }
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    ggml_gallocr_t ga = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend));
    ggml_gallocr_alloc_graph(ga, gf);
    for (int h = 0; h < H; h++) {
        ggml_backend_tensor_set(Q, q + ((size_t) h * NMAX + i0) * D, (size_t) h * N * D * 4, (size_t) N * D * 4);
    }
    ggml_backend_tensor_set(Kt, k, 0, ggml_nbytes(Kt));
    ggml_backend_tensor_set(V, fa ? v_rows : v_cols, 0, ggml_nbytes(V));
    const size_t cells = (size_t) n_kv * N;
    void * m = malloc(cells * 4);
    for (int r = 0; r < N; r++) {
        for (int c = 0; c < n_kv; c++) {
            const float value = c <= p0 + i0 + r ? 0.0f : -INFINITY;
            if (fa) {
                ((ggml_fp16_t *) m)[(size_t) r * n_kv + c] = ggml_fp32_to_fp16(value);
            } else {
                ((float *) m)[(size_t) r * n_kv + c] = value;
            }
        }
    }
    ggml_backend_tensor_set(mask, m, 0, ggml_nbytes(mask));
    free(m);
    compute(gf);
    const size_t n = (size_t) D * H * N;
    float *      raw = malloc(n * 4), *res = malloc(n * 4);
    ggml_backend_tensor_get(out, raw, 0, n * 4);
    for (int t = 0; t < N; t++) {
        for (int h = 0; h < H; h++) {  // flash attention's output is [D, H, N], the other [D, N, H]
            memcpy(res + ((size_t) t * H + h) * D, raw + (fa ? (size_t) t * H + h : (size_t) h * N + t) * D, D * 4);
        }
    }
    free(raw);
    ggml_gallocr_free(ga);
    ggml_free(ctx);
    return res;
}

static void test_attention(int fa, int n_kv) {
    const int D = 128, H = 12, Hkv = 2;  // Qwen2.5-1.5B's heads
    const int p0 = n_kv - 64 - 13;       // the batch's first position; the view's last cells masked
    float *   q = malloc(sizeof(float) * D * H * NMAX);
    for (int i = 0; i < D * H * NMAX; i++) {
        q[i] = frand();
    }
    const size_t   kv    = (size_t) D * n_kv * Hkv;
    ggml_fp16_t *k = malloc(2 * kv), *v_rows = malloc(2 * kv), *v_cols = malloc(2 * kv);
    for (int h = 0; h < Hkv; h++) {
        for (int c = 0; c < n_kv; c++) {
            for (int d = 0; d < D; d++) {
                const float kval = frand(), vval = frand();
                k[((size_t) h * n_kv + c) * D + d]      = ggml_fp32_to_fp16(kval);
                v_rows[((size_t) h * n_kv + c) * D + d] = ggml_fp32_to_fp16(vval);
                v_cols[((size_t) h * D + d) * n_kv + c] = ggml_fp32_to_fp16(vval);  // V transposed
            }
        }
    }
    const int ns[] = { 2, 4, 8, 13 };
    for (int use_ref = 0; use_ref <= 1; use_ref++) {
        ggml_backend_cpu_set_use_ref(backend, use_ref);
        printf("attention %-13s n_kv=%-4d use_ref=%d |", fa ? "flash" : "KQ,softmax,KQV", n_kv, use_ref);
        for (int a = 0; a < 4; a++) {
            const int n     = ns[a];
            float *   batch = attention(fa, q, k, v_rows, v_cols, D, H, Hkv, n_kv, p0, 0, n);
            float *   alone = malloc(sizeof(float) * H * D * n);
            for (int i = 0; i < n; i++) {
                float * row = attention(fa, q, k, v_rows, v_cols, D, H, Hkv, n_kv, p0, i, 1);
                memcpy(alone + (size_t) i * H * D, row, sizeof(float) * H * D);
                free(row);
            }
            report(batch, alone, n, (size_t) H * D);
            free(batch);
            free(alone);
        }
        printf("\n");
    }
    free(q);
    free(k);
    free(v_rows);
    free(v_cols);
}

int main(int argc, char ** argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    ggml_backend_load_all();
    backend = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(backend, argc > 1 ? atoi(argv[1]) : 2);
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    ggml_backend_dev_get_extra_bufts_t get_extra = (ggml_backend_dev_get_extra_bufts_t)
        ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t * extra = get_extra ? get_extra(dev) : NULL; extra && *extra; extra++) {
        if (strcmp(ggml_backend_buft_name(*extra), "CPU_REPACK") == 0) {
            repack_buft = *extra;
        }
    }
    const enum ggml_type types[] = { GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_Q4_0,
                                     GGML_TYPE_Q5_0, GGML_TYPE_Q8_0, GGML_TYPE_F16,  GGML_TYPE_F32 };
    for (unsigned t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        for (int repack = 0; repack <= 1; repack++) {
            test_mul_mat(types[t], 1536, 1536, repack);
        }
    }
    // The output heads' shapes: Qwen2.5-Coder-1.5B's (Q6_K) and 0.5B's (Q8_0).
    test_mul_mat(GGML_TYPE_Q6_K, 1536, 151936, 0);
    test_mul_mat(GGML_TYPE_Q8_0, 896, 151936, 0);
    for (int fa = 1; fa >= 0; fa--) {
        test_attention(fa, 256);
        test_attention(fa, 1024);
    }
    ggml_backend_free(backend);
    return 0;
}
