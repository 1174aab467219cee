/* A QEMU TCG plugin (host side, not part of any firmware) that counts the guest instructions
   executed at addresses in [lo, hi), or all of them without bounds, and prints "insns: N" at exit
   (visible with `-d plugin`). Works with qemu-user and qemu-system alike. Each `range=LO-HI`
   argument (sorted, disjoint, at most MAX_RANGES) also gets its own count, printed as
   "range I: N" in argument order: one run gives the instructions of every function. A range given
   as `shared=LO-HI` instead is a body several functions call (jump to) and return from: its
   instructions count towards the range whose code ran last before it, which is printed once as
   "range I calls J" (the calling range I, the shared range J; the shared range's own line counts
   nothing).

   Build: gcc -shared -fPIC -O2 -o insncount.so insncount.c
   Use:   qemu-aarch64 -plugin ./insncount.so,lo=0x400000,hi=0x401000 -d plugin ./prog
          qemu-aarch64 -plugin ./insncount.so,lo=0x400000,hi=0x401000,range=0x400000-0x400800,... ./prog

   With profile=PATH (and lo/hi), every instruction in [lo, hi) also gets its own execution count, and
   every control transfer out of it (a block that starts elsewhere than where the last one ended: a taken
   branch, a call, a return) is counted on the instruction that made it; at exit PATH gets one line
   "OFFSET COUNT TAKEN SPLIT" (hex offset from lo) per instruction executed, where SPLIT counts the bus
   transfers its misaligned data accesses took beyond the aligned ones (a word at an odd address takes
   three: byte, halfword, byte). aot's cycle estimate prices them.

   Debian ships the plugin-enabled emulators but not qemu-plugin.h, so the few entry points used
   here (plugin API version 1, QEMU 7.x) are declared by hand. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS };
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
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
typedef uint32_t qemu_plugin_meminfo_t;
enum qemu_plugin_mem_rw { QEMU_PLUGIN_MEM_R = 1, QEMU_PLUGIN_MEM_W, QEMU_PLUGIN_MEM_RW };
typedef void (*qemu_plugin_vcpu_mem_cb_t)(unsigned int vcpu_index, qemu_plugin_meminfo_t info, uint64_t vaddr,
                                          void *userdata);
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_mem_cb_t cb,
                                      enum qemu_plugin_cb_flags flags, enum qemu_plugin_mem_rw rw, void *userdata);
unsigned int qemu_plugin_mem_size_shift(qemu_plugin_meminfo_t info);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *), void *userdata);
void qemu_plugin_outs(const char *string);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

#define MAX_RANGES 4096

static uint64_t executed;
static uint64_t lo, hi = UINT64_MAX;
static uint64_t range_lo[MAX_RANGES], range_hi[MAX_RANGES], range_count[MAX_RANGES];
static int range_shared[MAX_RANGES], range_calls[MAX_RANGES], ranges, any_shared;
static int current = -1;     /* the range (not shared) whose code ran last */

/* Profile mode: per-byte-offset counters over [lo, hi), and where the block executed last ended. */
static const char *profile_path;
static uint64_t *pc_count, *pc_taken, *pc_split;
static uint64_t last_end, last_insn = UINT64_MAX;

struct block { uint64_t start, end, last; };

/* Before each block runs: if the one before did not fall through into it, its last instruction
   transferred control (one callback per block executed; profiling only). */
static void on_block(unsigned int vcpu, void *userdata)
{
    const struct block *b = userdata;
    (void)vcpu;
    if (b->start != last_end && last_insn >= lo && last_insn < hi)
        pc_taken[last_insn - lo]++;
    last_end = b->end;
    last_insn = b->last;
}

/* After each data access of an instruction in range: the transfers a bus of naturally aligned words,
   halfwords and bytes needs for it, beyond the one per word (or per access if shorter) an aligned one
   takes. */
static void on_access(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *userdata)
{
    uint64_t size = 1u << qemu_plugin_mem_size_shift(info), left = size, at = vaddr, pieces = 0;
    (void)vcpu;
    if ((vaddr & (size - 1)) == 0)
        return;
    while (left > 0) {
        uint64_t piece = left >= 4 && at % 4 == 0 ? 4 : left >= 2 && at % 2 == 0 ? 2 : 1;
        at += piece;
        left -= piece;
        pieces++;
    }
    *(uint64_t *)userdata += pieces - (size >= 4 ? size / 4 : 1);
}

static void profile_block(struct qemu_plugin_tb *tb, size_t n)
{
    size_t i;
    struct block *b = malloc(sizeof *b);     /* lives as long as the translation; blocks are few */
    struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, n - 1);
    b->start = qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, 0));
    b->last = qemu_plugin_insn_vaddr(insn);
    b->end = b->last + qemu_plugin_insn_size(insn);
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_block, QEMU_PLUGIN_CB_NO_REGS, b);
    for (i = 0; i < n; i++) {
        uint64_t pc;
        insn = qemu_plugin_tb_get_insn(tb, i);
        pc = qemu_plugin_insn_vaddr(insn);
        if (pc >= lo && pc < hi) {
            qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &pc_count[pc - lo], 1);
            qemu_plugin_register_vcpu_mem_cb(insn, on_access, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW,
                                             &pc_split[pc - lo]);
        }
    }
}

static void write_profile(void)
{
    uint64_t off;
    FILE *f = fopen(profile_path, "w");
    if (f == NULL) {
        fprintf(stderr, "insncount: cannot write %s\n", profile_path);
        return;
    }
    for (off = 0; off < hi - lo; off++)
        if (pc_count[off])
            fprintf(f, "%" PRIx64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", off, pc_count[off], pc_taken[off],
                    pc_split[off]);
    fclose(f);
}

/* Index of the range holding pc (binary search over the sorted ranges), or -1. */
static int range_of(uint64_t pc)
{
    int first = 0, last = ranges - 1;
    while (first <= last) {
        int mid = (first + last) / 2;
        if (pc < range_lo[mid])
            last = mid - 1;
        else if (pc >= range_hi[mid])
            first = mid + 1;
        else
            return mid;
    }
    return -1;
}

/* A block that starts in a range that is not shared: its code is the one running. */
static void on_range_block(unsigned int vcpu, void *userdata)
{
    (void)vcpu;
    current = (int)(intptr_t)userdata;
}

/* A block in a shared range: its instructions count towards the range running (userdata: how many
   in the low 32 bits, the shared range above them). */
static void on_shared_block(unsigned int vcpu, void *userdata)
{
    uint64_t packed = (uint64_t)(uintptr_t)userdata;
    (void)vcpu;
    if (current < 0) {
        fprintf(stderr, "insncount: a shared range ran before any other range\n");
        abort();
    }
    range_count[current] += packed & 0xffffffffu;
    range_calls[current] = (int)(packed >> 32) + 1;     /* 0: calls none */
}

/* Per-range counters: one inline increment per instruction inside a range; a shared range's
   instructions are counted by a callback per block, which knows the range running. */
static void count_ranges(struct qemu_plugin_tb *tb, size_t n)
{
    size_t i, in_shared = 0;
    int first = range_of(qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, 0))), shared = -1;
    for (i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        int r = range_of(qemu_plugin_insn_vaddr(insn));
        if (r >= 0 && range_shared[r]) {
            in_shared++;
            shared = r;
        } else if (r >= 0)
            qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &range_count[r], 1);
    }
    if (any_shared && first >= 0 && !range_shared[first])
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_range_block, QEMU_PLUGIN_CB_NO_REGS, (void *)(intptr_t)first);
    if (in_shared > 0)
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_shared_block, QEMU_PLUGIN_CB_NO_REGS,
                                             (void *)(uintptr_t)(in_shared | (uint64_t)shared << 32));
}

/* Called once per translated block: add an inline counter increment for the instructions in range
   (one per block when the whole block counts), so counting costs no callback per instruction. */
static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb), i, inside = 0;
    (void)id;
    if (profile_path != NULL && n > 0)
        profile_block(tb, n);
    if (ranges > 0)
        count_ranges(tb, n);
    for (i = 0; i < n; i++) {
        uint64_t pc = qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i));
        inside += pc >= lo && pc < hi;
    }
    if (inside == n) {
        qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &executed, n);
        return;
    }
    for (i = 0; i < n && inside > 0; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t pc = qemu_plugin_insn_vaddr(insn);
        if (pc >= lo && pc < hi)
            qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &executed, 1);
    }
}

static void print_count(qemu_plugin_id_t id, void *userdata)
{
    char line[64];
    int r;
    (void)id;
    (void)userdata;
    if (profile_path != NULL)
        write_profile();
    snprintf(line, sizeof line, "insns: %" PRIu64 "\n", executed);
    qemu_plugin_outs(line);
    for (r = 0; r < ranges; r++) {
        snprintf(line, sizeof line, "range %d: %" PRIu64 "\n", r, range_count[r]);
        qemu_plugin_outs(line);
        if (range_calls[r]) {
            snprintf(line, sizeof line, "range %d calls %d\n", r, range_calls[r] - 1);
            qemu_plugin_outs(line);
        }
    }
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                                               int argc, char **argv)
{
    int i;
    (void)info;
    for (i = 0; i < argc; i++) {
        if (strncmp(argv[i], "lo=", 3) == 0)
            lo = strtoull(argv[i] + 3, NULL, 0);
        else if (strncmp(argv[i], "hi=", 3) == 0)
            hi = strtoull(argv[i] + 3, NULL, 0);
        else if ((strncmp(argv[i], "range=", 6) == 0 || strncmp(argv[i], "shared=", 7) == 0) && ranges < MAX_RANGES) {
            char *end;
            range_shared[ranges] = argv[i][0] == 's';
            any_shared |= range_shared[ranges];
            range_lo[ranges] = strtoull(strchr(argv[i], '=') + 1, &end, 0);
            range_hi[ranges] = *end == '-' ? strtoull(end + 1, NULL, 0) : 0;
            if (range_hi[ranges] <= range_lo[ranges] || (ranges > 0 && range_lo[ranges] < range_hi[ranges - 1])) {
                fprintf(stderr, "insncount: range '%s' is empty or not after the one before\n", argv[i]);
                return -1;
            }
            ranges++;
        } else if (strncmp(argv[i], "profile=", 8) == 0) {
            profile_path = argv[i] + 8;
        } else {
            fprintf(stderr, "insncount: unknown argument '%s' (expected lo=ADDR, hi=ADDR, range=LO-HI, "
                    "shared=LO-HI, profile=PATH)\n",
                    argv[i]);
            return -1;
        }
    }
    if (profile_path != NULL) {
        if (hi == UINT64_MAX || hi <= lo || hi - lo > (64u << 20)) {
            fprintf(stderr, "insncount: profile needs lo and hi at most 64 MiB apart\n");
            return -1;
        }
        pc_count = calloc(hi - lo, sizeof *pc_count);
        pc_taken = calloc(hi - lo, sizeof *pc_taken);
        pc_split = calloc(hi - lo, sizeof *pc_split);
        if (pc_count == NULL || pc_taken == NULL || pc_split == NULL)
            return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, print_count, NULL);
    return 0;
}
