/*
 * The simulated cuDNN's descriptors (dnn.h): every kind is created and
 * destroyed here (one row per kind below); tensors, filters,
 * convolutions, activations and dropouts keep what their Set calls are
 * given and answer their Get calls with it, as cuDNN does.  The other
 * kinds' Set calls, and anything that needs a computed result, are
 * generated stubs (CUDNN_STATUS_NOT_SUPPORTED).
 */
#include <stdlib.h>
#include <string.h>

#include "dnn.h"
#include "handles.h"

/* Bytes of one element of each cudnnDataType_t (0: no whole byte). */
static const unsigned char type_bytes[DNN_DATA_TYPES] = {
    4, 8, 2, 1, 4, 4, 1, 4, 32, 2, 8, 1, 1, 1, 4, 1, 0, 0, 0, 4, 8, 16,
};

/* The dropout states cudnnDropoutGetStatesSize asks for: a fixed size,
 * as a device of the simulated one's size would need. */
#define DNN_DROPOUT_STATES ((size_t)132 * 1024 * 48)

/* Looks d up as a live descriptor of kind k: NULL when it is not (the
 * caller answers CUDNN_STATUS_BAD_PARAM). */
static dnn_desc_t *desc_of(const void *d, dnn_kind_t k)
{
    pthread_mutex_lock(&dnn_lock);
    dnn_desc_t *r = handle_is(d, DNN_MAGIC_DESC) ? (dnn_desc_t *)d : NULL;
    pthread_mutex_unlock(&dnn_lock);
    return r && r->kind == k ? r : NULL;
}

static cudnnStatus_t desc_create(dnn_kind_t k, void **out)
{
    if (!out)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    dnn_desc_t *d = calloc(1, sizeof *d);
    if (!d)
        return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    d->kind = k;
    d->groups = 1;
    pthread_mutex_lock(&dnn_lock);
    handle_add(d, DNN_MAGIC_DESC);
    pthread_mutex_unlock(&dnn_lock);
    *out = d;
    return CUDNN_STATUS_SUCCESS;
}

/* cuDNN accepts destroying NULL. */
static cudnnStatus_t desc_destroy(dnn_kind_t k, void *d)
{
    if (!d)
        return CUDNN_STATUS_SUCCESS;
    pthread_mutex_lock(&dnn_lock);
    int ok = handle_is(d, DNN_MAGIC_DESC) && ((dnn_desc_t *)d)->kind == k;
    if (ok)
        handle_del(d);
    pthread_mutex_unlock(&dnn_lock);
    if (!ok)
        return CUDNN_STATUS_BAD_PARAM;
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

/* One row per kind: cudnnCreateXDescriptor and cudnnDestroyXDescriptor. */
#define DNN_DESC_KIND(X, kind)                                                                                         \
    DNN_API cudnnStatus_t cudnnCreate##X##Descriptor(void **d)                                                         \
    {                                                                                                                  \
        return desc_create(kind, d);                                                                                   \
    }                                                                                                                  \
    DNN_API cudnnStatus_t cudnnDestroy##X##Descriptor(void *d)                                                         \
    {                                                                                                                  \
        return desc_destroy(kind, d);                                                                                  \
    }

DNN_DESC_KIND(Tensor, DNN_TENSOR)
DNN_DESC_KIND(Filter, DNN_FILTER)
DNN_DESC_KIND(Convolution, DNN_CONVOLUTION)
DNN_DESC_KIND(Activation, DNN_ACTIVATION)
DNN_DESC_KIND(Pooling, DNN_POOLING)
DNN_DESC_KIND(Dropout, DNN_DROPOUT)
DNN_DESC_KIND(RNN, DNN_RNN)
DNN_DESC_KIND(RNNData, DNN_RNN_DATA)
DNN_DESC_KIND(CTCLoss, DNN_CTC_LOSS)
DNN_DESC_KIND(SpatialTransformer, DNN_SPATIAL_TRANSFORMER)
DNN_DESC_KIND(LRN, DNN_LRN)
DNN_DESC_KIND(OpTensor, DNN_OP_TENSOR)
DNN_DESC_KIND(ReduceTensor, DNN_REDUCE_TENSOR)
DNN_DESC_KIND(TensorTransform, DNN_TENSOR_TRANSFORM)
DNN_DESC_KIND(SeqData, DNN_SEQ_DATA)
DNN_DESC_KIND(Attn, DNN_ATTN)

/* ------------------------------------------------------------------------
 * Tensors and filters
 * ---------------------------------------------------------------------- */

static int type_ok(int t)
{
    return t >= 0 && t < DNN_DATA_TYPES && type_bytes[t];
}

/* dims and strides as cuDNN checks them: 3 to 8 dimensions (a tensor may
 * have fewer, down to 1), every size and stride positive. */
static cudnnStatus_t dims_ok(int nb, int min, const int *dim, const int *stride)
{
    if (nb < min || nb > DNN_DIM_MAX)
        return CUDNN_STATUS_BAD_PARAM;
    if (!dim)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    for (int i = 0; i < nb; i++)
        if (dim[i] <= 0 || (stride && stride[i] <= 0))
            return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnSetTensorNdDescriptor(void *desc, int dataType, int nbDims, const int dimA[],
                                                 const int strideA[])
{
    dnn_desc_t *d = desc_of(desc, DNN_TENSOR);
    if (!d || !type_ok(dataType))
        return CUDNN_STATUS_BAD_PARAM;
    if (!strideA)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    cudnnStatus_t r = dims_ok(nbDims, 1, dimA, strideA);
    if (r != CUDNN_STATUS_SUCCESS)
        return r;
    d->data_type = dataType;
    d->nb_dims = nbDims;
    memcpy(d->dim, dimA, (size_t)nbDims * sizeof *dimA);
    memcpy(d->stride, strideA, (size_t)nbDims * sizeof *strideA);
    return CUDNN_STATUS_SUCCESS;
}

/* Fully packed strides of dims in NCHW or NHWC order. */
static void packed_strides(int format, int nb, const int *dim, int *stride)
{
    stride[nb - 1] = 1;
    for (int i = nb - 2; i >= 0; i--)
        stride[i] = stride[i + 1] * dim[i + 1];
    if (format == DNN_TENSOR_NHWC && nb > 2) {
        stride[1] = 1; /* C innermost, then W, H ..., N outermost */
        int s = dim[1];
        for (int i = nb - 1; i >= 2; i--) {
            stride[i] = s;
            s *= dim[i];
        }
        stride[0] = s;
    }
}

DNN_API cudnnStatus_t cudnnSetTensorNdDescriptorEx(void *desc, int format, int dataType, int nbDims, const int dimA[])
{
    if (format != DNN_TENSOR_NCHW && format != DNN_TENSOR_NHWC)
        return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t r = dims_ok(nbDims, 3, dimA, NULL);
    if (r != CUDNN_STATUS_SUCCESS)
        return r;
    int stride[DNN_DIM_MAX];
    packed_strides(format, nbDims, dimA, stride);
    return cudnnSetTensorNdDescriptor(desc, dataType, nbDims, dimA, stride);
}

DNN_API cudnnStatus_t cudnnSetTensor4dDescriptor(void *desc, int format, int dataType, int n, int c, int h, int w)
{
    return cudnnSetTensorNdDescriptorEx(desc, format, dataType, 4, (const int[]){n, c, h, w});
}

DNN_API cudnnStatus_t cudnnSetTensor4dDescriptorEx(void *desc, int dataType, int n, int c, int h, int w, int ns, int cs,
                                                   int hs, int ws)
{
    return cudnnSetTensorNdDescriptor(desc, dataType, 4, (const int[]){n, c, h, w}, (const int[]){ns, cs, hs, ws});
}

DNN_API cudnnStatus_t cudnnGetTensorNdDescriptor(const void *desc, int nbDimsRequested, int *dataType, int *nbDims,
                                                 int dimA[], int strideA[])
{
    dnn_desc_t *d = desc_of(desc, DNN_TENSOR);
    if (!d || nbDimsRequested < 0)
        return CUDNN_STATUS_BAD_PARAM;
    if (!dataType || !nbDims || (nbDimsRequested && (!dimA || !strideA)))
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    *dataType = d->data_type;
    *nbDims = d->nb_dims;
    for (int i = 0; i < nbDimsRequested && i < d->nb_dims; i++) {
        dimA[i] = d->dim[i];
        strideA[i] = d->stride[i];
    }
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnGetTensor4dDescriptor(const void *desc, int *dataType, int *n, int *c, int *h, int *w,
                                                 int *ns, int *cs, int *hs, int *ws)
{
    int nb, dim[DNN_DIM_MAX], stride[DNN_DIM_MAX];
    cudnnStatus_t r = cudnnGetTensorNdDescriptor(desc, DNN_DIM_MAX, dataType, &nb, dim, stride);
    if (r != CUDNN_STATUS_SUCCESS)
        return r;
    if (nb != 4)
        return CUDNN_STATUS_BAD_PARAM;
    if (!n || !c || !h || !w || !ns || !cs || !hs || !ws)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    *n = dim[0], *c = dim[1], *h = dim[2], *w = dim[3];
    *ns = stride[0], *cs = stride[1], *hs = stride[2], *ws = stride[3];
    return CUDNN_STATUS_SUCCESS;
}

/* Bytes spanned: the last element's offset plus one, times its size. */
DNN_API cudnnStatus_t cudnnGetTensorSizeInBytes(const void *desc, size_t *size)
{
    dnn_desc_t *d = desc_of(desc, DNN_TENSOR);
    if (!d || !d->nb_dims)
        return CUDNN_STATUS_BAD_PARAM;
    if (!size)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    size_t last = 0;
    for (int i = 0; i < d->nb_dims; i++)
        last += (size_t)(d->dim[i] - 1) * (size_t)d->stride[i];
    *size = (last + 1) * type_bytes[d->data_type];
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnSetFilterNdDescriptor(void *desc, int dataType, int format, int nbDims,
                                                 const int filterDimA[])
{
    dnn_desc_t *d = desc_of(desc, DNN_FILTER);
    if (!d || !type_ok(dataType) || format < DNN_TENSOR_NCHW || format > DNN_TENSOR_VECT_C)
        return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t r = dims_ok(nbDims, 3, filterDimA, NULL);
    if (r != CUDNN_STATUS_SUCCESS)
        return r;
    d->data_type = dataType;
    d->format = format;
    d->nb_dims = nbDims;
    memcpy(d->dim, filterDimA, (size_t)nbDims * sizeof *filterDimA);
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnSetFilter4dDescriptor(void *desc, int dataType, int format, int k, int c, int h, int w)
{
    return cudnnSetFilterNdDescriptor(desc, dataType, format, 4, (const int[]){k, c, h, w});
}

DNN_API cudnnStatus_t cudnnGetFilterNdDescriptor(const void *desc, int nbDimsRequested, int *dataType, int *format,
                                                 int *nbDims, int filterDimA[])
{
    dnn_desc_t *d = desc_of(desc, DNN_FILTER);
    if (!d || nbDimsRequested < 0)
        return CUDNN_STATUS_BAD_PARAM;
    if (!dataType || !format || !nbDims || (nbDimsRequested && !filterDimA))
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    *dataType = d->data_type;
    *format = d->format;
    *nbDims = d->nb_dims;
    for (int i = 0; i < nbDimsRequested && i < d->nb_dims; i++)
        filterDimA[i] = d->dim[i];
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnGetFilter4dDescriptor(const void *desc, int *dataType, int *format, int *k, int *c, int *h,
                                                 int *w)
{
    int nb, dim[DNN_DIM_MAX];
    cudnnStatus_t r = cudnnGetFilterNdDescriptor(desc, DNN_DIM_MAX, dataType, format, &nb, dim);
    if (r != CUDNN_STATUS_SUCCESS)
        return r;
    if (nb != 4)
        return CUDNN_STATUS_BAD_PARAM;
    if (!k || !c || !h || !w)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    *k = dim[0], *c = dim[1], *h = dim[2], *w = dim[3];
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnGetFilterSizeInBytes(const void *desc, size_t *size)
{
    dnn_desc_t *d = desc_of(desc, DNN_FILTER);
    if (!d || !d->nb_dims)
        return CUDNN_STATUS_BAD_PARAM;
    if (!size)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    size_t n = type_bytes[d->data_type];
    for (int i = 0; i < d->nb_dims; i++)
        n *= (size_t)d->dim[i];
    *size = n;
    return CUDNN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Convolutions
 * ---------------------------------------------------------------------- */

DNN_API cudnnStatus_t cudnnSetConvolutionNdDescriptor(void *desc, int arrayLength, const int padA[],
                                                      const int filterStrideA[], const int dilationA[], int mode,
                                                      int computeType)
{
    dnn_desc_t *d = desc_of(desc, DNN_CONVOLUTION);
    if (!d || arrayLength < 1 || arrayLength > DNN_DIM_MAX - 2 || (mode != 0 && mode != 1) || !type_ok(computeType))
        return CUDNN_STATUS_BAD_PARAM;
    if (!padA || !filterStrideA || !dilationA)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    for (int i = 0; i < arrayLength; i++)
        if (padA[i] < 0 || filterStrideA[i] <= 0 || dilationA[i] <= 0)
            return CUDNN_STATUS_BAD_PARAM;
    d->nb_dims = arrayLength;
    memcpy(d->dim, padA, (size_t)arrayLength * sizeof *padA);
    memcpy(d->stride, filterStrideA, (size_t)arrayLength * sizeof *filterStrideA);
    memcpy(d->dilation, dilationA, (size_t)arrayLength * sizeof *dilationA);
    d->mode = mode;
    d->data_type = computeType;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnSetConvolution2dDescriptor(void *desc, int pad_h, int pad_w, int u, int v, int dil_h,
                                                      int dil_w, int mode, int computeType)
{
    return cudnnSetConvolutionNdDescriptor(desc, 2, (const int[]){pad_h, pad_w}, (const int[]){u, v},
                                           (const int[]){dil_h, dil_w}, mode, computeType);
}

DNN_API cudnnStatus_t cudnnGetConvolutionNdDescriptor(const void *desc, int arrayLengthRequested, int *arrayLength,
                                                      int padA[], int strideA[], int dilationA[], int *mode,
                                                      int *computeType)
{
    dnn_desc_t *d = desc_of(desc, DNN_CONVOLUTION);
    if (!d || arrayLengthRequested < 0)
        return CUDNN_STATUS_BAD_PARAM;
    if (!arrayLength || !mode || !computeType || (arrayLengthRequested && (!padA || !strideA || !dilationA)))
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    *arrayLength = d->nb_dims;
    for (int i = 0; i < arrayLengthRequested && i < d->nb_dims; i++) {
        padA[i] = d->dim[i];
        strideA[i] = d->stride[i];
        dilationA[i] = d->dilation[i];
    }
    *mode = d->mode;
    *computeType = d->data_type;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnGetConvolution2dDescriptor(const void *desc, int *pad_h, int *pad_w, int *u, int *v,
                                                      int *dil_h, int *dil_w, int *mode, int *computeType)
{
    int n, pad[DNN_DIM_MAX], stride[DNN_DIM_MAX], dil[DNN_DIM_MAX];
    cudnnStatus_t r = cudnnGetConvolutionNdDescriptor(desc, DNN_DIM_MAX, &n, pad, stride, dil, mode, computeType);
    if (r != CUDNN_STATUS_SUCCESS)
        return r;
    if (n != 2)
        return CUDNN_STATUS_BAD_PARAM;
    if (!pad_h || !pad_w || !u || !v || !dil_h || !dil_w)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    *pad_h = pad[0], *pad_w = pad[1], *u = stride[0], *v = stride[1], *dil_h = dil[0], *dil_w = dil[1];
    return CUDNN_STATUS_SUCCESS;
}

/* A convolution's int settings: group count (at least 1), math type
 * (cudnnMathType_t 0 to 3), reorder type (0 or 1). */
static cudnnStatus_t conv_set(void *desc, size_t field, int value, int min, int max)
{
    dnn_desc_t *d = desc_of(desc, DNN_CONVOLUTION);
    if (!d || value < min || value > max)
        return CUDNN_STATUS_BAD_PARAM;
    memcpy((char *)d + field, &value, sizeof value);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t conv_get(const void *desc, size_t field, int *value)
{
    dnn_desc_t *d = desc_of(desc, DNN_CONVOLUTION);
    if (!d)
        return CUDNN_STATUS_BAD_PARAM;
    if (!value)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    memcpy(value, (const char *)d + field, sizeof *value);
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnSetConvolutionGroupCount(void *desc, int groupCount)
{
    return conv_set(desc, offsetof(dnn_desc_t, groups), groupCount, 1, 1 << 30);
}

DNN_API cudnnStatus_t cudnnGetConvolutionGroupCount(void *desc, int *groupCount)
{
    return conv_get(desc, offsetof(dnn_desc_t, groups), groupCount);
}

DNN_API cudnnStatus_t cudnnSetConvolutionMathType(void *desc, int mathType)
{
    return conv_set(desc, offsetof(dnn_desc_t, math_type), mathType, 0, 3);
}

DNN_API cudnnStatus_t cudnnGetConvolutionMathType(void *desc, int *mathType)
{
    return conv_get(desc, offsetof(dnn_desc_t, math_type), mathType);
}

DNN_API cudnnStatus_t cudnnSetConvolutionReorderType(void *desc, int reorderType)
{
    return conv_set(desc, offsetof(dnn_desc_t, reorder_type), reorderType, 0, 1);
}

DNN_API cudnnStatus_t cudnnGetConvolutionReorderType(void *desc, int *reorderType)
{
    return conv_get(desc, offsetof(dnn_desc_t, reorder_type), reorderType);
}

/* ------------------------------------------------------------------------
 * Activations and dropouts
 * ---------------------------------------------------------------------- */

DNN_API cudnnStatus_t cudnnSetActivationDescriptor(void *desc, int mode, int reluNanOpt, double coef)
{
    dnn_desc_t *d = desc_of(desc, DNN_ACTIVATION);
    if (!d || mode < 0 || mode > 6 || (reluNanOpt != 0 && reluNanOpt != 1))
        return CUDNN_STATUS_BAD_PARAM;
    d->mode = mode;
    d->nan_opt = reluNanOpt;
    d->coef = coef;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnGetActivationDescriptor(const void *desc, int *mode, int *reluNanOpt, double *coef)
{
    dnn_desc_t *d = desc_of(desc, DNN_ACTIVATION);
    if (!d)
        return CUDNN_STATUS_BAD_PARAM;
    if (!mode || !reluNanOpt || !coef)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    *mode = d->mode;
    *reluNanOpt = d->nan_opt;
    *coef = d->coef;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnDropoutGetStatesSize(void *handle, size_t *sizeInBytes)
{
    if (!sizeInBytes)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    if (!dnn_handle_live(handle))
        return CUDNN_STATUS_BAD_PARAM;
    *sizeInBytes = DNN_DROPOUT_STATES;
    return CUDNN_STATUS_SUCCESS;
}

/* Records the settings; the random states a GPU would initialise in
 * `states` are not computed (nothing reads them: every dropout and RNN
 * that would is a stub). */
static cudnnStatus_t dropout_set(void *desc, void *handle, float dropout, void *states, size_t bytes,
                                 unsigned long long seed)
{
    dnn_desc_t *d = desc_of(desc, DNN_DROPOUT);
    if (!d || !dnn_handle_live(handle) || !(dropout >= 0.0f && dropout <= 1.0f))
        return CUDNN_STATUS_BAD_PARAM;
    if (states && bytes < DNN_DROPOUT_STATES)
        return CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT;
    d->dropout = dropout;
    d->states = states;
    d->seed = seed;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API cudnnStatus_t cudnnSetDropoutDescriptor(void *desc, void *handle, float dropout, void *states, size_t bytes,
                                                unsigned long long seed)
{
    return dropout_set(desc, handle, dropout, states, bytes, seed);
}

DNN_API cudnnStatus_t cudnnRestoreDropoutDescriptor(void *desc, void *handle, float dropout, void *states, size_t bytes,
                                                    unsigned long long seed)
{
    return dropout_set(desc, handle, dropout, states, bytes, seed);
}

DNN_API cudnnStatus_t cudnnGetDropoutDescriptor(void *desc, void *handle, float *dropout, void **states,
                                                unsigned long long *seed)
{
    dnn_desc_t *d = desc_of(desc, DNN_DROPOUT);
    if (!d || !dnn_handle_live(handle))
        return CUDNN_STATUS_BAD_PARAM;
    if (!dropout || !states || !seed)
        return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
    *dropout = d->dropout;
    *states = d->states;
    *seed = d->seed;
    return CUDNN_STATUS_SUCCESS;
}
