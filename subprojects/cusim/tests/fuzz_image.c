/*
 * The module image reader (src/module_image.c) under libFuzzer: any bytes
 * are parsed as an image of exactly their length, and the answer is a
 * success or CUDA_ERROR_INVALID_IMAGE, never a read outside them; read
 * again as devices of sm_90 and sm_86 load it (a fatbin's entry chosen),
 * also CUDA_ERROR_NO_BINARY_FOR_GPU or, for a cubin's index,
 * CUDA_ERROR_OUT_OF_MEMORY.  Inputs
 * whose first byte is odd are instead the payload of one compressed fatbin
 * entry (src/fatbin_decompress.c), wrapped in a container: that byte
 * picks the codec (LZ4, zstd) and the kind, the next 12 give the declared
 * and compressed sizes, so lying sizes, cut streams and bad match offsets
 * reach the decoders.  Seeds: tests/modules (the images nvcc made).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "module_image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void ignore(void *arg, const char *name, size_t len)
{
    (void)arg;
    volatile char c = len ? name[len - 1] : 0; /* the name lies in the image */
    (void)c;
}

static void kernel(void *arg, const char *name, size_t len, const sim_kernel_info_t *ki)
{
    (void)ki;
    ignore(arg, name, len);
}

static void global(void *arg, const sim_global_info_t *g)
{
    ignore(arg, g->name, g->len);
    volatile uint8_t c = g->init && g->size ? ((const uint8_t *)g->init)[g->size - 1] : 0; /* in the image */
    (void)c;
}

static void parse(const uint8_t *image, size_t len)
{
    CUresult r = sim_image_parse(image, len, ignore, NULL, NULL);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_IMAGE)
        abort();
    static const sim_image_sink_t sink = {kernel, global};
    static const unsigned devices[] = {90, 86};
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
        r = sim_image_read_for(image, len, devices[i], &sink, NULL, NULL);
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_IMAGE && r != CUDA_ERROR_NO_BINARY_FOR_GPU &&
            r != CUDA_ERROR_OUT_OF_MEMORY)
            abort();
    }
}

/* data = [pick][u64 declared size][u32 compressed size][payload]: a
 * container of one entry, in a buffer of exactly its length. */
static void parse_entry(const uint8_t *data, size_t size)
{
    enum { PICK = 1, SIZES = 12, HEADER = 16, ENTRY = 72 };
    if (size < PICK + SIZES)
        return;
    size_t payload = size - PICK - SIZES, len = HEADER + ENTRY + payload;
    uint8_t *c = calloc(1, len);
    if (!c)
        abort();
    uint32_t magic = SIM_FATBIN_MAGIC, ehsize = ENTRY;
    uint16_t version = 1, hsize = HEADER, kind = data[0] & 2 ? SIM_FATBIN_KIND_ELF : SIM_FATBIN_KIND_PTX;
    uint64_t body = ENTRY + payload, psize = payload, flags = 0x11 | (data[0] & 4 ? 0x8000 : 0x2000);
    memcpy(c, &magic, 4);
    memcpy(c + 4, &version, 2);
    memcpy(c + 6, &hsize, 2);
    memcpy(c + 8, &body, 8);
    uint8_t *e = c + HEADER;
    memcpy(e, &kind, 2);
    memcpy(e + 2, &version, 2);
    memcpy(e + 4, &ehsize, 4);
    memcpy(e + 8, &psize, 8);
    memcpy(e + 16, data + PICK + 8, 4); /* compressed size */
    memcpy(e + 40, &flags, 8);
    memcpy(e + 56, data + PICK, 8); /* declared size */
    memcpy(e + ENTRY, data + PICK + SIZES, payload);
    parse(c, len);
    free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size && (data[0] & 1))
        parse_entry(data, size);
    else
        parse(data, size);
    return 0;
}
