/*
 * The simulated cuDNN's ABI and state (libcudnn.so.9; dnn.c, dnn_desc.c):
 * the status codes, enums and handle types of NVIDIA's cudnn_graph.h,
 * cudnn_ops.h and cudnn_cnn.h that the implemented functions use, declared
 * here in this project's own words with cuDNN 9's values.  Nothing here
 * computes: a handle keeps its stream, a descriptor what was set in it,
 * and every function that would run work is a generated stub answering
 * CUDNN_STATUS_NOT_SUPPORTED.
 */
#ifndef CUCACHE_SIM_DNN_H
#define CUCACHE_SIM_DNN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define DNN_API __attribute__((visibility("default")))

/* The cuDNN this library stands in for: the version PyTorch's check
 * (torch.backends.cudnn: same major, minor at least its build's) accepts
 * for any cuDNN 9 build; the export list (exports/dnn.txt) is this one's. */
#define DNN_MAJOR 9
#define DNN_MINOR 19
#define DNN_PATCH 0
#define DNN_VERSION (DNN_MAJOR * 10000 + DNN_MINOR * 100 + DNN_PATCH)
#define DNN_MAX_DEVICE_VERSION 900 /* the simulated device's sm_90 */
#define DNN_CUDART_FALLBACK 12000  /* cudnnGetCudartVersion without a runtime loaded */

typedef enum {
    CUDNN_STATUS_SUCCESS = 0,
    CUDNN_STATUS_NOT_INITIALIZED = 1001,
    CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH = 1002,
    CUDNN_STATUS_BAD_PARAM = 2000,
    CUDNN_STATUS_BAD_PARAM_NULL_POINTER = 2002,
    CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND = 2005,
    CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT = 2006,
    CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE = 2012,
    CUDNN_STATUS_NOT_SUPPORTED = 3000,
    CUDNN_STATUS_INTERNAL_ERROR = 4000,
    CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED = 4003,
    CUDNN_STATUS_EXECUTION_FAILED = 5000,
} cudnnStatus_t;

/* libraryPropertyType (library_types.h) */
typedef enum { DNN_MAJOR_VERSION = 0, DNN_MINOR_VERSION = 1, DNN_PATCH_LEVEL = 2 } dnn_property_t;

#define DNN_DIM_MAX 8     /* CUDNN_DIM_MAX */
#define DNN_DATA_TYPES 22 /* cudnnDataType_t: FLOAT 0 ... COMPLEX_FP64 21 */
#define DNN_TENSOR_NCHW 0 /* cudnnTensorFormat_t */
#define DNN_TENSOR_NHWC 1
#define DNN_TENSOR_VECT_C 2

/* A handle: the stream its work would go to. */
typedef struct dnn_handle_s {
    void *stream; /* cudaStream_t; NULL: the legacy default stream */
} dnn_handle_t;

/* The descriptor kinds: one row each in dnn_desc.c's table. */
typedef enum {
    DNN_TENSOR,
    DNN_FILTER,
    DNN_CONVOLUTION,
    DNN_ACTIVATION,
    DNN_POOLING,
    DNN_DROPOUT,
    DNN_RNN,
    DNN_RNN_DATA,
    DNN_CTC_LOSS,
    DNN_SPATIAL_TRANSFORMER,
    DNN_LRN,
    DNN_OP_TENSOR,
    DNN_REDUCE_TENSOR,
    DNN_TENSOR_TRANSFORM,
    DNN_SEQ_DATA,
    DNN_ATTN,
    DNN_KINDS
} dnn_kind_t;

/* A descriptor: its kind and what the Set calls of the kinds that keep
 * anything stored (the others keep nothing: their Set calls are stubs). */
typedef struct dnn_desc_s {
    dnn_kind_t kind;
    int data_type;           /* cudnnDataType_t: tensor, filter, convolution (compute type) */
    int format;              /* cudnnTensorFormat_t: filter */
    int nb_dims;             /* tensor, filter: dimensions; convolution: spatial ones */
    int dim[DNN_DIM_MAX];    /* tensor, filter: sizes; convolution: padding */
    int stride[DNN_DIM_MAX]; /* tensor: element strides; convolution: filter strides */
    int dilation[DNN_DIM_MAX];
    int mode;         /* convolution: cudnnConvolutionMode_t; activation: cudnnActivationMode_t */
    int nan_opt;      /* activation: cudnnNanPropagation_t */
    double coef;      /* activation */
    int groups;       /* convolution: 1 until set */
    int math_type;    /* convolution: cudnnMathType_t */
    int reorder_type; /* convolution: cudnnReorderType_t */
    float dropout;    /* dropout: its probability */
    void *states;     /* dropout: the caller's state buffer */
    unsigned long long seed;
} dnn_desc_t;

/* The live handles and descriptors (handles.c's table, under dnn_lock):
 * a destroyed or garbage one is CUDNN_STATUS_BAD_PARAM, never a crash. */
extern pthread_mutex_t dnn_lock;
#define DNN_MAGIC_HANDLE 0x444e4e48u /* "DNNH" */
#define DNN_MAGIC_DESC 0x444e4e44u   /* "DNND" */

/* True when h is a live handle (takes dnn_lock). */
int dnn_handle_live(const void *h);


/* The entry points (the stubs are dnn_stubs.c's). */
/* dnn.c */
DNN_API size_t cudnnGetVersion(void);
DNN_API size_t cudnnGetMaxDeviceVersion(void);
DNN_API size_t cudnnGetCudartVersion(void);
DNN_API cudnnStatus_t cudnnGetProperty(int type, int *value);
DNN_API cudnnStatus_t cudnnGraphVersionCheck(void);
DNN_API cudnnStatus_t cudnnOpsVersionCheck(void);
DNN_API cudnnStatus_t cudnnCnnVersionCheck(void);
DNN_API cudnnStatus_t cudnnAdvVersionCheck(void);
DNN_API const char *cudnnGetErrorString(int status);
DNN_API void cudnnGetLastErrorString(char *message, size_t max_size);
DNN_API cudnnStatus_t cudnnCreate(dnn_handle_t **handle);
DNN_API cudnnStatus_t cudnnDestroy(dnn_handle_t *handle);
DNN_API cudnnStatus_t cudnnSetStream(dnn_handle_t *handle, void *stream);
DNN_API cudnnStatus_t cudnnGetStream(dnn_handle_t *handle, void **stream);
/* dnn_desc.c: cudnnCreateXDescriptor and cudnnDestroyXDescriptor of every kind */
#define DNN_DESC_DECLARE(X)                                                                                            \
    DNN_API cudnnStatus_t cudnnCreate##X##Descriptor(void **d);                                                        \
    DNN_API cudnnStatus_t cudnnDestroy##X##Descriptor(void *d);
DNN_DESC_DECLARE(Tensor)
DNN_DESC_DECLARE(Filter)
DNN_DESC_DECLARE(Convolution)
DNN_DESC_DECLARE(Activation)
DNN_DESC_DECLARE(Pooling)
DNN_DESC_DECLARE(Dropout)
DNN_DESC_DECLARE(RNN)
DNN_DESC_DECLARE(RNNData)
DNN_DESC_DECLARE(CTCLoss)
DNN_DESC_DECLARE(SpatialTransformer)
DNN_DESC_DECLARE(LRN)
DNN_DESC_DECLARE(OpTensor)
DNN_DESC_DECLARE(ReduceTensor)
DNN_DESC_DECLARE(TensorTransform)
DNN_DESC_DECLARE(SeqData)
DNN_DESC_DECLARE(Attn)
DNN_API cudnnStatus_t cudnnSetTensorNdDescriptor(void *desc, int dataType, int nbDims, const int dimA[],
                                                 const int strideA[]);
DNN_API cudnnStatus_t cudnnSetTensorNdDescriptorEx(void *desc, int format, int dataType, int nbDims, const int dimA[]);
DNN_API cudnnStatus_t cudnnSetTensor4dDescriptor(void *desc, int format, int dataType, int n, int c, int h, int w);
DNN_API cudnnStatus_t cudnnSetTensor4dDescriptorEx(void *desc, int dataType, int n, int c, int h, int w, int ns, int cs,
                                                   int hs, int ws);
DNN_API cudnnStatus_t cudnnGetTensorNdDescriptor(const void *desc, int nbDimsRequested, int *dataType, int *nbDims,
                                                 int dimA[], int strideA[]);
DNN_API cudnnStatus_t cudnnGetTensor4dDescriptor(const void *desc, int *dataType, int *n, int *c, int *h, int *w,
                                                 int *ns, int *cs, int *hs, int *ws);
DNN_API cudnnStatus_t cudnnGetTensorSizeInBytes(const void *desc, size_t *size);
DNN_API cudnnStatus_t cudnnSetFilterNdDescriptor(void *desc, int dataType, int format, int nbDims,
                                                 const int filterDimA[]);
DNN_API cudnnStatus_t cudnnSetFilter4dDescriptor(void *desc, int dataType, int format, int k, int c, int h, int w);
DNN_API cudnnStatus_t cudnnGetFilterNdDescriptor(const void *desc, int nbDimsRequested, int *dataType, int *format,
                                                 int *nbDims, int filterDimA[]);
DNN_API cudnnStatus_t cudnnGetFilter4dDescriptor(const void *desc, int *dataType, int *format, int *k, int *c, int *h,
                                                 int *w);
DNN_API cudnnStatus_t cudnnGetFilterSizeInBytes(const void *desc, size_t *size);
DNN_API cudnnStatus_t cudnnSetConvolutionNdDescriptor(void *desc, int arrayLength, const int padA[],
                                                      const int filterStrideA[], const int dilationA[], int mode,
                                                      int computeType);
DNN_API cudnnStatus_t cudnnSetConvolution2dDescriptor(void *desc, int pad_h, int pad_w, int u, int v, int dil_h,
                                                      int dil_w, int mode, int computeType);
DNN_API cudnnStatus_t cudnnGetConvolutionNdDescriptor(const void *desc, int arrayLengthRequested, int *arrayLength,
                                                      int padA[], int strideA[], int dilationA[], int *mode,
                                                      int *computeType);
DNN_API cudnnStatus_t cudnnGetConvolution2dDescriptor(const void *desc, int *pad_h, int *pad_w, int *u, int *v,
                                                      int *dil_h, int *dil_w, int *mode, int *computeType);
DNN_API cudnnStatus_t cudnnSetConvolutionGroupCount(void *desc, int groupCount);
DNN_API cudnnStatus_t cudnnGetConvolutionGroupCount(void *desc, int *groupCount);
DNN_API cudnnStatus_t cudnnSetConvolutionMathType(void *desc, int mathType);
DNN_API cudnnStatus_t cudnnGetConvolutionMathType(void *desc, int *mathType);
DNN_API cudnnStatus_t cudnnSetConvolutionReorderType(void *desc, int reorderType);
DNN_API cudnnStatus_t cudnnGetConvolutionReorderType(void *desc, int *reorderType);
DNN_API cudnnStatus_t cudnnSetActivationDescriptor(void *desc, int mode, int reluNanOpt, double coef);
DNN_API cudnnStatus_t cudnnGetActivationDescriptor(const void *desc, int *mode, int *reluNanOpt, double *coef);
DNN_API cudnnStatus_t cudnnDropoutGetStatesSize(void *handle, size_t *sizeInBytes);
DNN_API cudnnStatus_t cudnnSetDropoutDescriptor(void *desc, void *handle, float dropout, void *states, size_t bytes,
                                                unsigned long long seed);
DNN_API cudnnStatus_t cudnnRestoreDropoutDescriptor(void *desc, void *handle, float dropout, void *states, size_t bytes,
                                                    unsigned long long seed);
DNN_API cudnnStatus_t cudnnGetDropoutDescriptor(void *desc, void *handle, float *dropout, void **states,
                                                unsigned long long *seed);

#endif
