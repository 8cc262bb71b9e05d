/*
 * The simulator's stubs of the real libraries' functions it does not
 * implement (src/exports lists them; src/gen-exports writes one SIM_STUB
 * line per name).  A stub reads no argument, is weak (a real definition of
 * the same name wins at link time), writes
 *   cucache-sim: NAME is not simulated (ERROR)
 * the first time it is called and answers "not supported".
 */
#ifndef CUCACHE_SIM_STUB_H
#define CUCACHE_SIM_STUB_H

#include <stdatomic.h>

/* The runtime's answer (runtime_stub.c): cudaErrorNotSupported, recorded
 * as the calling thread's last error. */
int sim_stub_runtime(atomic_flag *once, const char *name);
/* The driver's answer (driver.c): CUDA_ERROR_NOT_SUPPORTED. */
int sim_stub_driver(atomic_flag *once, const char *name);
/* The cuDNN's (dnn.c): CUDNN_STATUS_NOT_SUPPORTED. */
int sim_stub_dnn(atomic_flag *once, const char *name);
/* The NVML's (nvml.c): NVML_ERROR_NOT_SUPPORTED. */
int sim_stub_nvml(atomic_flag *once, const char *name);
/* cuBLAS's and cuBLASLt's answer (blas_device.c): CUBLAS_STATUS_NOT_SUPPORTED. */
int sim_stub_blas(atomic_flag *once, const char *name);

#define SIM_STUB(name, helper)                                                                                         \
    __attribute__((weak, visibility("default"))) int name(void);                                                       \
    __attribute__((weak, visibility("default"))) int name(void)                                                        \
    {                                                                                                                  \
        static atomic_flag once_ = ATOMIC_FLAG_INIT;                                                                   \
        return helper(&once_, #name);                                                                                  \
    }

#endif
