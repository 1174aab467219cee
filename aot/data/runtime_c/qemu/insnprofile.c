/* A QEMU TCG plugin (host side, not part of any firmware) that counts the guest instructions executed
   in each of several address ranges (one per kernel function) and prints "range I: N" per range at exit
   (visible with `-d plugin`). Works with qemu-user and qemu-system alike.

   Build: gcc -shared -fPIC -O2 -o insnprofile.so insnprofile.c
   Use:   qemu-arm -plugin ./insnprofile.so,ranges=ranges.txt -d plugin ./prog
          ranges.txt: one "LO HI" pair per line (hexadecimal with 0x, or decimal), sorted, disjoint.

   Debian ships the plugin-enabled emulators but not qemu-plugin.h, so the few entry points used
   here (plugin API version 1, QEMU 7.x) are declared by hand, as in insncount.c. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                           void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr,
                                              uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn, enum qemu_plugin_op op,
                                                void *ptr, uint64_t imm);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *), void *userdata);
void qemu_plugin_outs(const char *string);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

static uint64_t *lo, *hi, *executed;
static size_t ranges;

/* The range holding pc, or -1 (binary search over the sorted, disjoint ranges). */
static long range_of(uint64_t pc)
{
    size_t a = 0, b = ranges;
    while (a < b) {
        size_t m = (a + b) / 2;
        if (pc < lo[m])
            b = m;
        else if (pc >= hi[m])
            a = m + 1;
        else
            return (long)m;
    }
    return -1;
}

/* Called once per translated block: one inline counter increment for the block when all of it lies in
   one range, else one per instruction inside some range. */
static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb), i;
    long first;
    int same = 1;
    (void)id;
    if (n == 0)
        return;
    first = range_of(qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, 0)));
    for (i = 1; i < n && same; i++)
        same = range_of(qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i))) == first;
    if (same) {
        if (first >= 0)
            qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &executed[first], n);
        return;
    }
    for (i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        long r = range_of(qemu_plugin_insn_vaddr(insn));
        if (r >= 0)
            qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &executed[r], 1);
    }
}

static void print_counts(qemu_plugin_id_t id, void *userdata)
{
    char line[64];
    size_t i;
    (void)id;
    (void)userdata;
    for (i = 0; i < ranges; i++) {
        snprintf(line, sizeof line, "range %zu: %" PRIu64 "\n", i, executed[i]);
        qemu_plugin_outs(line);
    }
}

static int read_ranges(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t cap = 64;
    unsigned long long a, b;
    if (!f) {
        fprintf(stderr, "insnprofile: cannot open '%s'\n", path);
        return -1;
    }
    lo = malloc(cap * sizeof *lo);
    hi = malloc(cap * sizeof *hi);
    while (lo && hi && fscanf(f, "%lli %lli", &a, &b) == 2) {
        if (ranges == cap) {
            cap *= 2;
            lo = realloc(lo, cap * sizeof *lo);
            hi = realloc(hi, cap * sizeof *hi);
            if (!lo || !hi)
                break;
        }
        if (ranges && a < hi[ranges - 1]) {
            fprintf(stderr, "insnprofile: ranges must be sorted and disjoint (line %zu)\n", ranges + 1);
            fclose(f);
            return -1;
        }
        lo[ranges] = a;
        hi[ranges] = b;
        ranges++;
    }
    fclose(f);
    executed = calloc(ranges ? ranges : 1, sizeof *executed);
    return lo && hi && executed ? 0 : -1;
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                                               int argc, char **argv)
{
    int i;
    (void)info;
    for (i = 0; i < argc; i++) {
        if (strncmp(argv[i], "ranges=", 7) == 0) {
            if (read_ranges(argv[i] + 7) != 0)
                return -1;
        } else {
            fprintf(stderr, "insnprofile: unknown argument '%s' (expected ranges=FILE)\n", argv[i]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, print_counts, NULL);
    return 0;
}
