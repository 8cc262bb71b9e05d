/*
 * A program calling functions the simulator does not implement, from the
 * graphics interoperability family it leaves out of scope: it must start
 * (the names are exported) and each call must answer "not supported",
 * record the runtime's last error and write one line on stderr the first
 * time that function is called.  cudaCreateChannelDesc, a call that is not
 * an error, must give back its fields.
 *
 * Built twice by meson: `sim_stubbed` on the simulator's cusim/cuda_api.h, linked with
 * the simulated libraries; `sim_stubbed_real` on the real headers, linked
 * with the real libcudart.so and the driver stub (run with LD_LIBRARY_PATH
 * on the simulator, which once made it exit 127 on an undefined symbol).
 * Exit 0 when every check passes, 1 otherwise.
 */
#ifdef SIMTEST_REAL_HEADERS
#include <cuda.h>
#include <cuda_runtime_api.h>
#else
#include "cusim/cuda_api.h"
/* The real prototypes, which cuda_api.h does not declare. */
typedef struct cudaGraphicsResource *cudaGraphicsResource_t;
typedef struct CUgraphicsResource_st *CUgraphicsResource;
cudaError_t cudaGraphicsResourceSetMapFlags(cudaGraphicsResource_t resource, unsigned int flags);
cudaError_t cudaGraphicsUnregisterResource(cudaGraphicsResource_t resource);
CUresult cuGraphicsUnregisterResource(CUgraphicsResource resource);
#endif

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int failures;

static void expect(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "FAIL: %s\n", what);
        failures++;
    }
}

static const char want_log[] =
    "cucache-sim: cudaGraphicsResourceSetMapFlags is not simulated (cudaErrorNotSupported)\n"
    "cucache-sim: cudaGraphicsUnregisterResource is not simulated (cudaErrorNotSupported)\n"
    "cucache-sim: cuGraphicsUnregisterResource is not simulated (CUDA_ERROR_NOT_SUPPORTED)\n";

int main(void)
{
    /* stderr goes to a file while the stubs run */
    FILE *log = tmpfile();
    int saved = dup(2);
    if (!log || saved < 0 || dup2(fileno(log), 2) < 0) {
        perror("stubbed: redirecting stderr");
        return 1;
    }

    struct cudaChannelFormatDesc desc = cudaCreateChannelDesc(8, 16, 0, 0, cudaChannelFormatKindUnsigned);
    cudaGraphicsResource_t resource = (cudaGraphicsResource_t)(void *)&desc;
    cudaError_t first = cudaGraphicsResourceSetMapFlags(resource, 0);
    cudaError_t last = cudaGetLastError();
    cudaError_t cleared = cudaGetLastError();
    cudaError_t again = cudaGraphicsResourceSetMapFlags(NULL, 0);
    cudaError_t peek = cudaPeekAtLastError();
    cudaError_t freed = cudaGraphicsUnregisterResource(resource);
    CUresult driver = cuGraphicsUnregisterResource(NULL);
    CUresult driver_again = cuGraphicsUnregisterResource((CUgraphicsResource)(void *)&desc);

    fflush(stderr);
    dup2(saved, 2);
    char got[1024] = {0};
    rewind(log);
    size_t n = fread(got, 1, sizeof got - 1, log);
    got[n] = '\0';

    expect(desc.x == 8 && desc.y == 16 && desc.z == 0 && desc.w == 0 && desc.f == cudaChannelFormatKindUnsigned,
           "cudaCreateChannelDesc gives back its fields");
    expect(first == cudaErrorNotSupported, "cudaGraphicsResourceSetMapFlags answers cudaErrorNotSupported");
    expect(last == cudaErrorNotSupported, "cudaGetLastError reports the stub's error");
    expect(cleared == cudaSuccess, "cudaGetLastError cleared it");
    expect(again == cudaErrorNotSupported, "a second call, on null arguments, answers the same");
    expect(peek == cudaErrorNotSupported, "cudaPeekAtLastError sees the second call's error");
    expect(freed == cudaErrorNotSupported, "cudaGraphicsUnregisterResource answers cudaErrorNotSupported");
    expect(driver == CUDA_ERROR_NOT_SUPPORTED && driver_again == CUDA_ERROR_NOT_SUPPORTED,
           "cuGraphicsUnregisterResource answers CUDA_ERROR_NOT_SUPPORTED");
    if (strcmp(got, want_log) != 0) {
        fprintf(stderr, "FAIL: stderr while the stubs ran was:\n%s--- instead of:\n%s", got, want_log);
        failures++;
    }
    if (failures == 0)
        printf("stubbed: every check passed\n");
    return failures ? 1 : 0;
}
