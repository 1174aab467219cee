/* startup.c -- minimal Cortex-M start-up for running aot models under qemu-system-arm.
 *
 * Why this file exists:
 *  - QEMU's M-profile reset loads SP and PC from a vector table at address 0x0; newlib's rdimon
 *    crt0 (`_start`) has none, so without this file the CPU locks up at reset.
 *  - The FPU (and MVE on Cortex-M55) is disabled at reset: the first FP/vector instruction of a
 *    hard-float model would fault (NOCP).  Reset_Handler opens CP10/CP11 in CPACR first.
 *  - rdimon's crt0 overrides SP with the stack reported by the semihosting SYS_HEAPINFO call,
 *    whose answer depends on QEMU's guess of the RAM layout (it can land inside our .bss, or be 0
 *    when the ELF covers QEMU's biggest RAM bank).  crt0 calls the weak hook `_stack_init` right
 *    after setting SP, so we define it to put SP back to the linker script's `__stack_top`.
 *  - rdimon's `_sbrk` grows the heap from `end` and refuses to pass the current SP or the
 *    HEAPINFO limit, which breaks when the stack and heap live in different banks.  Our `_sbrk`
 *    uses the heap the linker script reserves: [__heap_start, __heap_end).
 *  - Stack overflow is caught: MSPLIM on ARMv8-M mainline (Cortex-M55), a no-access MPU region
 *    over the lowest 4 KiB of the stack on ARMv6-M/ARMv7-M when the core has an MPU (QEMU's
 *    Cortex-M3/M4/M7 do; an ARMv6-M build run on mps2-an385's M3 gets it as well).
 *  - A fault must not hang the emulator: every exception prints a line through semihosting
 *    (exception number, stacked PC/LR, fault status registers) and makes QEMU exit with status
 *    AOT_FAULT_EXIT_STATUS (3), distinct from main's own return codes (0 ok, 1 error, 2 usage).
 *
 * Everything else (zeroing .bss, semihosting argv from -append, stdio, exit status through
 * SYS_EXIT_EXTENDED) is newlib/rdimon: link with `--specs=rdimon.specs -T <board>.ld`.
 * .data is not copied: QEMU loads every ELF segment at its address (VMA == LMA in our scripts).
 *
 * Builds warning-free with -std=c99 -Wall -Wextra -Werror -pedantic for Cortex-M4/M7/M55 (hard
 * float) and Cortex-M0+/M3 (soft float; FPU enabling is skipped when __ARM_FP is not defined).
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifndef AOT_FAULT_EXIT_STATUS
#define AOT_FAULT_EXIT_STATUS 3
#endif

#if defined(__ARM_ARCH_8M_MAIN__) || defined(__ARM_ARCH_8_1M_MAIN__)
#define AOT_V8M_MAIN 1 /* has MSPLIM: stack overflow raises a UsageFault (STKOF) */
#endif
#if __ARM_ARCH_ISA_THUMB >= 2
#define AOT_HAS_CFSR 1 /* ARMv7-M / ARMv8-M mainline: configurable fault status registers */
#endif
#if __ARM_ARCH < 8
#define AOT_PMSAV7_GUARD 1 /* ARMv6-M/v7-M: no MSPLIM; a PMSAv7 MPU region (if any) guards the stack */
#endif

#define REG32(addr) (*(volatile uint32_t *)(addr))
#define SCB_CFSR REG32(0xE000ED28u)
#define SCB_HFSR REG32(0xE000ED2Cu)
#define SCB_MMFAR REG32(0xE000ED34u)
#define SCB_BFAR REG32(0xE000ED38u)
#define SCB_CPACR REG32(0xE000ED88u)
#define MPU_TYPE REG32(0xE000ED90u)
#define MPU_CTRL REG32(0xE000ED94u)
#define MPU_RNR REG32(0xE000ED98u)
#define MPU_RBAR REG32(0xE000ED9Cu)
#define MPU_RASR REG32(0xE000EDA0u)

/* From the linker script. */
extern char __stack_top[], __stack_limit[], __heap_start[], __heap_end[];
/* newlib rdimon crt0: zeroes .bss, sets up semihosting stdio and argv, calls main, then exit. */
extern void _start(void) __attribute__((noreturn));

void Reset_Handler(void) __attribute__((noreturn));
void Fault_Handler(void) __attribute__((naked));
void _stack_init(void) __attribute__((naked));
void *_sbrk(ptrdiff_t incr);
void aot_fault_report(const uint32_t *frame) __attribute__((noreturn, used));

/* Named handlers default to the fault reporter; a program may define its own (e.g. SysTick). */
#include "../cortex_m_vectors.h"

void Reset_Handler(void)
{
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
    SCB_CPACR |= 0xFu << 20; /* CP10 + CP11 full access: FPU and MVE (Helium) */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
#ifdef AOT_PMSAV7_GUARD
    /* No-access 4 KiB MPU region at the bottom of the stack (PRIVDEFENA keeps the default map
       for everything else; the MPU is off in HardFault): a stack overflow faults (status 3)
       instead of running down through the heap into the mirrored code at 0x00400000. */
    if ((MPU_TYPE >> 8) & 0xFFu) {
        MPU_RNR = 0;
        MPU_RBAR = ((uint32_t)(uintptr_t)__stack_limit + 0xFFFu) & ~0xFFFu;
        MPU_RASR = (1u << 28) | (11u << 1) | 1u; /* XN, AP=no access, SIZE=2^(11+1), ENABLE */
        MPU_CTRL = (1u << 2) | 1u;               /* PRIVDEFENA | ENABLE */
        __asm__ volatile("dsb\n\tisb" ::: "memory");
    }
#endif
    _start();
}

/* Called by rdimon's crt0 right after it loaded SP from SYS_HEAPINFO (or __stack): take SP back
   to the linker script's stack, which is where we reserved room for it. No stack is in use yet. */
void _stack_init(void)
{
    __asm__ volatile(
        "ldr r3, 1f\n\t"
        "mov sp, r3\n\t"
#ifdef AOT_V8M_MAIN
        "ldr r3, 2f\n\t"
        "msr msplim, r3\n\t"
#endif
        "bx lr\n\t"
        ".p2align 2\n"
        "1: .word __stack_top\n"
        "2: .word __stack_limit\n");
}

/* Heap for malloc (newlib stdio buffers, FILE structures). */
void *_sbrk(ptrdiff_t incr)
{
    static uintptr_t brk;
    uintptr_t prev;
    if (brk == 0)
        brk = (uintptr_t)__heap_start;
    prev = brk;
    if (incr > 0 ? (uintptr_t)incr > (uintptr_t)__heap_end - brk
                 : (uintptr_t)-incr > brk - (uintptr_t)__heap_start) {
        errno = ENOMEM;
        return (void *)-1;
    }
    brk += (uintptr_t)incr;
    return (void *)prev;
}

/* ---- faults ---------------------------------------------------------------------------- */

static int semihost(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static char *put_str(char *p, const char *s)
{
    while (*s)
        *p++ = *s++;
    return p;
}

static char *put_hex(char *p, const char *label, uint32_t v)
{
    int i;
    p = put_str(p, label);
    for (i = 28; i >= 0; i -= 4)
        *p++ = "0123456789abcdef"[(v >> i) & 0xFu];
    return p;
}

/* Own small stack for the reporter: the faulting SP may be exhausted or garbage. */
#define AOT_FAULT_STACK_BYTES 512
#define AOT_STR_(x) #x
#define AOT_STR(x) AOT_STR_(x)
static uint64_t aot_fault_stack[AOT_FAULT_STACK_BYTES / 8] __attribute__((used));

/* Common entry of all exceptions: r0 = exception frame (MSP or PSP per EXC_RETURN bit 2),
   then switch to aot_fault_stack (clearing MSPLIM first on ARMv8-M) and report. */
void Fault_Handler(void)
{
    __asm__ volatile(
        "movs r0, #4\n\t"
        "mov r1, lr\n\t"
        "tst r0, r1\n\t"
        "mrs r0, msp\n\t"
        "beq 1f\n\t"
        "mrs r0, psp\n"
        "1:\n\t"
#ifdef AOT_V8M_MAIN
        "movs r1, #0\n\t"
        "msr msplim, r1\n\t"
#endif
        "ldr r1, 2f\n\t"
        "mov sp, r1\n\t"
        "ldr r1, 3f\n\t"
        "bx r1\n\t"
        ".p2align 2\n"
        "2: .word aot_fault_stack + " AOT_STR(AOT_FAULT_STACK_BYTES) "\n"
        "3: .word aot_fault_report\n");
}

void aot_fault_report(const uint32_t *frame)
{
    static const char *const names[] = {"", "", "NMI", "HardFault", "MemManage", "BusFault",
                                        "UsageFault", "SecureFault"};
    char msg[160], *p = msg;
    uint32_t ipsr, exit_block[2];
    uintptr_t f = (uintptr_t)frame;

    __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
    ipsr &= 0x1FFu;
    p = put_str(p, "\n*** aot baremetal: ");
    p = put_str(p, ipsr < sizeof names / sizeof names[0] && ipsr >= 2 ? names[ipsr] : "unexpected exception");
    p = put_hex(p, " ipsr=0x", ipsr);
    /* Only trust the stacked frame when it lies inside our stack and stacking did not fail. */
    if ((f & 3u) == 0 && f >= (uintptr_t)__stack_limit && f + 32 <= (uintptr_t)__stack_top
#ifdef AOT_HAS_CFSR
        && (SCB_CFSR & ((1u << 4) | (1u << 12) | (1u << 20))) == 0 /* MSTKERR, STKERR, STKOF */
#endif
    ) {
        p = put_hex(p, " pc=0x", frame[6]);
        p = put_hex(p, " lr=0x", frame[5]);
    }
#ifdef AOT_HAS_CFSR
    p = put_hex(p, " cfsr=0x", SCB_CFSR);
    p = put_hex(p, " hfsr=0x", SCB_HFSR);
    p = put_hex(p, " mmfar=0x", SCB_MMFAR);
    p = put_hex(p, " bfar=0x", SCB_BFAR);
#endif
    p = put_str(p, "\n");
    *p = '\0';
    semihost(0x04, msg); /* SYS_WRITE0 */

    exit_block[0] = 0x20026u; /* ADP_Stopped_ApplicationExit */
    exit_block[1] = AOT_FAULT_EXIT_STATUS;
    for (;;)
        semihost(0x20, exit_block); /* SYS_EXIT_EXTENDED: QEMU exits with exit_block[1] */
}
