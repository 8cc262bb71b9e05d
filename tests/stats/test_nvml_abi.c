/*
 * Proves stats/nvml_abi.c, the NVML process list that the OOM report and
 * cucache-top share, against a fake library: the newest process-list call
 * a library has is the one chosen, with its row size; rows of both layouts
 * are read as pid and bytes (NVML's "not available" as 0); an array NVML
 * says is too small is grown to its count and asked again; a list that
 * keeps growing gives up after the tries with NVML's code; NVML's errors
 * come back as they are.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hostalloc.h"
#include "nvml_abi.h"

/* The fake library: `procs` processes, rows written in `row`'s layout. */
typedef struct fake_s {
    unsigned procs;     /* processes it lists */
    unsigned grow;      /* processes that start at each ask */
    int fail;           /* nonzero: every ask answers this */
    unsigned asks;      /* asks made */
    const char *has[3]; /* the process-list calls it exports */
} fake_t;
static fake_t fake;

static void fake_row(void *infos, size_t row, unsigned i)
{
    unsigned pid = 1000 + i;
    unsigned long long used = i == 1 ? ~0ull : (i + 1) * 4096ull;
    if (row == sizeof(st_nvml_proc_v2_t))
        ((st_nvml_proc_v2_t *)infos)[i] = (st_nvml_proc_v2_t){pid, used, ~0u, ~0u};
    else
        ((st_nvml_proc_v1_t *)infos)[i] = (st_nvml_proc_v1_t){pid, used};
}

static int fake_list(size_t row, unsigned *count, void *infos)
{
    fake.asks++;
    fake.procs += fake.grow;
    if (fake.fail)
        return fake.fail;
    if (*count < fake.procs) {
        *count = fake.procs;
        return ST_NVML_INSUFFICIENT_SIZE;
    }
    *count = fake.procs;
    for (unsigned i = 0; i < fake.procs; i++)
        fake_row(infos, row, i);
    return ST_NVML_OK;
}

static int fake_v2(st_nvml_dev_t dev, unsigned *count, void *infos)
{
    (void)dev;
    return fake_list(sizeof(st_nvml_proc_v2_t), count, infos);
}

static int fake_v1(st_nvml_dev_t dev, unsigned *count, void *infos)
{
    (void)dev;
    return fake_list(sizeof(st_nvml_proc_v1_t), count, infos);
}

static void *fake_sym(void *lib, const char *name)
{
    (void)lib;
    for (size_t i = 0; i < 3 && fake.has[i]; i++)
        if (strcmp(fake.has[i], name) == 0)
            return strcmp(name, "nvmlDeviceGetComputeRunningProcesses") == 0 ? (void *)fake_v1 : (void *)fake_v2;
    return NULL;
}

static void test_newest_call(void **state)
{
    (void)state;
    fake = (fake_t){.has = {"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v3"}};
    st_nvml_list_t l = st_nvml_find_list(NULL, fake_sym);
    assert_ptr_equal(l.call, fake_v2);
    assert_int_equal(l.row, sizeof(st_nvml_proc_v2_t));
    fake = (fake_t){.has = {"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"}};
    l = st_nvml_find_list(NULL, fake_sym);
    assert_ptr_equal(l.call, fake_v2);
    fake = (fake_t){.has = {"nvmlDeviceGetComputeRunningProcesses"}};
    l = st_nvml_find_list(NULL, fake_sym);
    assert_ptr_equal(l.call, fake_v1);
    assert_int_equal(l.row, sizeof(st_nvml_proc_v1_t));
    fake = (fake_t){0};
    assert_null(st_nvml_find_list(NULL, fake_sym).call);
}

/* procs processes listed by call (row bytes each), first rows asked first. */
static void check_list(st_nvml_procs_fn call, size_t row, unsigned procs, unsigned first, unsigned asks)
{
    fake = (fake_t){.procs = procs};
    st_nvml_proc_t *rows;
    unsigned n;
    assert_int_equal(st_nvml_procs((st_nvml_list_t){call, row}, NULL, first, 4, &rows, &n), ST_NVML_OK);
    assert_int_equal(fake.asks, asks);
    assert_int_equal(n, procs);
    for (unsigned i = 0; i < n; i++) {
        assert_int_equal(rows[i].pid, 1000 + i);
        assert_int_equal(rows[i].used, i == 1 ? 0 : (i + 1) * 4096ull);
    }
    hostalloc_free(rows);
}

static void test_rows_and_growth(void **state)
{
    (void)state;
    check_list(fake_v2, sizeof(st_nvml_proc_v2_t), 5, 8, 1);
    check_list(fake_v1, sizeof(st_nvml_proc_v1_t), 5, 8, 1);
    check_list(fake_v2, sizeof(st_nvml_proc_v2_t), 40, 8, 2);
    check_list(fake_v1, sizeof(st_nvml_proc_v1_t), 40, 8, 2);
}

static void test_gives_up_and_errors(void **state)
{
    (void)state;
    st_nvml_proc_t *rows;
    unsigned n;
    fake = (fake_t){.procs = 10, .grow = 100};
    assert_int_equal(st_nvml_procs((st_nvml_list_t){fake_v2, sizeof(st_nvml_proc_v2_t)}, NULL, 8, 4, &rows, &n),
                     ST_NVML_INSUFFICIENT_SIZE);
    assert_int_equal(fake.asks, 4);
    assert_null(rows);
    assert_int_equal(n, 0);
    fake = (fake_t){.procs = 3, .fail = 999};
    assert_int_equal(st_nvml_procs((st_nvml_list_t){fake_v1, sizeof(st_nvml_proc_v1_t)}, NULL, 8, 4, &rows, &n), 999);
    assert_int_equal(fake.asks, 1);
    assert_null(rows);
    assert_string_equal(st_nvml_text(NULL, 999), "unknown error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_newest_call),
        cmocka_unit_test(test_rows_and_growth),
        cmocka_unit_test(test_gives_up_and_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
