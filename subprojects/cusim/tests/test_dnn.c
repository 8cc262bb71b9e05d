/*
 * Proves the cuDNN stand-in (libcudnn.so.9), linked like PyTorch: its
 * version is a cuDNN 9 (cudnnGetVersion and cudnnGetProperty agree) and its
 * runtime version the loaded runtime's; error strings are cuDNN's names;
 * a handle keeps its stream, and a destroyed or foreign handle is
 * BAD_PARAM, not a crash; tensor, filter and convolution descriptors give
 * back what was set (a 4d tensor's packed strides, NCHW and NHWC, its size
 * in bytes) and refuse bad dimensions, NULLs and a descriptor of another
 * kind; a function that would compute answers NOT_SUPPORTED and says so
 * in cudnnGetLastErrorString.
 */
#include "simtest.h"

#include "../src/dnn.h"

#include <string.h>

int cudnnConvolutionForward(void);
int cudnnBackendCreateDescriptor(void);

static void test_versions(void **state)
{
    (void)state;
    int major, minor, patch;
    assert_int_equal(cudnnGetProperty(DNN_MAJOR_VERSION, &major), CUDNN_STATUS_SUCCESS);
    assert_int_equal(cudnnGetProperty(DNN_MINOR_VERSION, &minor), CUDNN_STATUS_SUCCESS);
    assert_int_equal(cudnnGetProperty(DNN_PATCH_LEVEL, &patch), CUDNN_STATUS_SUCCESS);
    assert_int_equal(major, 9);
    assert_int_equal(cudnnGetVersion(), (size_t)(major * 10000 + minor * 100 + patch));
    assert_int_equal(cudnnGetProperty(7, &major), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnGetProperty(DNN_MAJOR_VERSION, NULL), CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    int rt;
    assert_int_equal(cudaRuntimeGetVersion(&rt), cudaSuccess);
    assert_int_equal(cudnnGetCudartVersion(), (size_t)rt);
    assert_string_equal(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED), "CUDNN_STATUS_NOT_SUPPORTED");
    assert_string_equal(cudnnGetErrorString(CUDNN_STATUS_SUCCESS), "CUDNN_STATUS_SUCCESS");
}

static void test_handles(void **state)
{
    (void)state;
    dnn_handle_t *h;
    assert_int_equal(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
    cudaStream_t s;
    assert_int_equal(cudaStreamCreate(&s), cudaSuccess);
    assert_int_equal(cudnnSetStream(h, s), CUDNN_STATUS_SUCCESS);
    void *got = NULL;
    assert_int_equal(cudnnGetStream(h, &got), CUDNN_STATUS_SUCCESS);
    assert_ptr_equal(got, s);
    assert_int_equal(cudnnGetStream(h, NULL), CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    int not_a_handle = 0;
    assert_int_equal(cudnnSetStream((dnn_handle_t *)&not_a_handle, s), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
    assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnSetStream(h, s), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

static void test_tensor(void **state)
{
    (void)state;
    void *t, *f;
    assert_int_equal(cudnnCreateTensorDescriptor(&t), CUDNN_STATUS_SUCCESS);
    assert_int_equal(cudnnSetTensor4dDescriptor(t, DNN_TENSOR_NCHW, 0, 2, 3, 4, 5), CUDNN_STATUS_SUCCESS);
    int type, n, c, h, w, ns, cs, hs, ws;
    assert_int_equal(cudnnGetTensor4dDescriptor(t, &type, &n, &c, &h, &w, &ns, &cs, &hs, &ws), CUDNN_STATUS_SUCCESS);
    assert_int_equal(n * 1000 + c * 100 + h * 10 + w, 2345);
    assert_int_equal(ns, 60);
    assert_int_equal(cs, 20);
    assert_int_equal(hs, 5);
    assert_int_equal(ws, 1);
    size_t bytes;
    assert_int_equal(cudnnGetTensorSizeInBytes(t, &bytes), CUDNN_STATUS_SUCCESS);
    assert_int_equal(bytes, 2 * 3 * 4 * 5 * 4);
    assert_int_equal(cudnnSetTensor4dDescriptor(t, DNN_TENSOR_NHWC, 2, 2, 3, 4, 5), CUDNN_STATUS_SUCCESS);
    assert_int_equal(cudnnGetTensor4dDescriptor(t, &type, &n, &c, &h, &w, &ns, &cs, &hs, &ws), CUDNN_STATUS_SUCCESS);
    assert_int_equal(type, 2);
    assert_int_equal(cs, 1);
    assert_int_equal(ws, 3);
    assert_int_equal(hs, 15);
    assert_int_equal(ns, 60);
    assert_int_equal(cudnnSetTensor4dDescriptor(t, DNN_TENSOR_NCHW, 0, 0, 3, 4, 5), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnSetTensorNdDescriptor(t, 0, 9, (int[9]){1}, (int[9]){1}), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnSetTensorNdDescriptor(t, 0, 2, NULL, (int[2]){1, 1}), CUDNN_STATUS_BAD_PARAM_NULL_POINTER);

    assert_int_equal(cudnnCreateFilterDescriptor(&f), CUDNN_STATUS_SUCCESS);
    /* a filter is not a tensor */
    assert_int_equal(cudnnSetTensor4dDescriptor(f, DNN_TENSOR_NCHW, 0, 2, 3, 4, 5), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnDestroyTensorDescriptor(f), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnSetFilter4dDescriptor(f, 0, DNN_TENSOR_NCHW, 8, 3, 3, 3), CUDNN_STATUS_SUCCESS);
    int k, fmt;
    assert_int_equal(cudnnGetFilter4dDescriptor(f, &type, &fmt, &k, &c, &h, &w), CUDNN_STATUS_SUCCESS);
    assert_int_equal(k * 1000 + c * 100 + h * 10 + w, 8333);
    assert_int_equal(cudnnDestroyFilterDescriptor(f), CUDNN_STATUS_SUCCESS);
    assert_int_equal(cudnnDestroyTensorDescriptor(t), CUDNN_STATUS_SUCCESS);
    assert_int_equal(cudnnDestroyTensorDescriptor(t), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnDestroyTensorDescriptor(NULL), CUDNN_STATUS_SUCCESS);
}

static void test_convolution(void **state)
{
    (void)state;
    void *cd;
    assert_int_equal(cudnnCreateConvolutionDescriptor(&cd), CUDNN_STATUS_SUCCESS);
    assert_int_equal(cudnnSetConvolution2dDescriptor(cd, 1, 2, 1, 1, 1, 1, 1, 0), CUDNN_STATUS_SUCCESS);
    int g, m;
    assert_int_equal(cudnnGetConvolutionGroupCount(cd, &g), CUDNN_STATUS_SUCCESS);
    assert_int_equal(g, 1);
    assert_int_equal(cudnnSetConvolutionGroupCount(cd, 4), CUDNN_STATUS_SUCCESS);
    assert_int_equal(cudnnSetConvolutionGroupCount(cd, 0), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnGetConvolutionGroupCount(cd, &g), CUDNN_STATUS_SUCCESS);
    assert_int_equal(g, 4);
    assert_int_equal(cudnnSetConvolutionMathType(cd, 1), CUDNN_STATUS_SUCCESS);
    assert_int_equal(cudnnGetConvolutionMathType(cd, &m), CUDNN_STATUS_SUCCESS);
    assert_int_equal(m, 1);
    int len, pad[2], stride[2], dil[2], mode, type;
    assert_int_equal(cudnnGetConvolutionNdDescriptor(cd, 2, &len, pad, stride, dil, &mode, &type),
                     CUDNN_STATUS_SUCCESS);
    assert_int_equal(len, 2);
    assert_int_equal(pad[1], 2);
    assert_int_equal(mode, 1);
    assert_int_equal(cudnnDestroyConvolutionDescriptor(cd), CUDNN_STATUS_SUCCESS);
}

static void test_compute_not_supported(void **state)
{
    (void)state;
    assert_int_equal(cudnnConvolutionForward(), CUDNN_STATUS_NOT_SUPPORTED);
    char msg[128];
    cudnnGetLastErrorString(msg, sizeof msg);
    assert_non_null(strstr(msg, "cudnnConvolutionForward"));
    assert_int_equal(cudnnBackendCreateDescriptor(), CUDNN_STATUS_NOT_SUPPORTED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_handles),
        cmocka_unit_test(test_tensor),
        cmocka_unit_test(test_convolution),
        cmocka_unit_test(test_compute_not_supported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
