/* startup.c -- reset and fault handling for aot's device harness, on a real board or under qemu.
 *
 * Unlike the semihosting start-up (../baremetal/startup.c) this one needs no debugger and no C
 * library start files: the image sits in flash, so .data is copied from its load address and
 * .bss zeroed here; then the FPU (and MVE) is switched on, the board's aot_board_init() brings up
 * the clocks and the console, and main() runs. The linker script is device.ld.j2.
 *
 * A fault prints one protocol line on the console (m-fault-<exception>-pc-<addr>-cfsr-<status>)
 * so the host can say what happened, then stops: under qemu through a semihosting exit with
 * status 3 (the qemu loader enables semihosting), on a board by sleeping until the host resets it.
 *
 * Builds warning-free with -std=c99 -Wall -Wextra -Werror -pedantic for Cortex-M0+/M3/M4/M7/M55.
 */
#include <stdint.h>

#include "aot_device.h"

#if defined(__ARM_ARCH_8M_MAIN__) || defined(__ARM_ARCH_8_1M_MAIN__)
#define AOT_V8M_MAIN 1 /* has MSPLIM: a stack overflow raises a UsageFault */
#endif
#if __ARM_ARCH_ISA_THUMB >= 2
#define AOT_HAS_CFSR 1
#endif

#define REG32(addr) (*(volatile uint32_t *)(addr))
#define SCB_VTOR REG32(0xE000ED08u)
#define SCB_CFSR REG32(0xE000ED28u)
#define SCB_CPACR REG32(0xE000ED88u)

/* From the linker script. */
extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[];
extern char __stack_top[], __stack_limit[];

int main(void);
void Reset_Handler(void) __attribute__((noreturn));
void Fault_Handler(void);


#include "../cortex_m_vectors.h"

void Reset_Handler(void)
{
    uint32_t *src, *dst;
#ifdef AOT_V8M_MAIN
    __asm__ volatile("msr msplim, %0" : : "r"(__stack_limit));
#endif
#if __ARM_ARCH >= 7
    SCB_VTOR = (uint32_t)(uintptr_t)&aot_vectors; /* boot aliases (0x0, ITCM) differ between chips */
#endif
    for (src = __data_load, dst = __data_start; dst < __data_end;)
        *dst++ = *src++;
    for (dst = __bss_start; dst < __bss_end;)
        *dst++ = 0;
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
    SCB_CPACR |= 0xFu << 20; /* CP10 + CP11 full access: FPU and MVE */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    aot_board_init();
    main();
    aot_stop(0);
}

static void put_str(const char *s)
{
    while (*s)
        aot_console_putc(*s++);
}

static void put_hex(uint32_t v)
{
    int i;
    for (i = 28; i >= 0; i -= 4)
        aot_console_putc("0123456789abcdef"[(v >> i) & 0xFu]);
}

/* Every exception but SysTick: say which, where, why, and stop. The console driver is polled,
   so it works here; a fault inside the driver itself loops back and stops in aot_stop. */
void Fault_Handler(void)
{
    static int reporting;
    uint32_t ipsr, lr, *frame;
    __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
    __asm__ volatile("mov %0, lr" : "=r"(lr));
    if (lr & 4u)
        __asm__ volatile("mrs %0, psp" : "=r"(frame));
    else
        __asm__ volatile("mrs %0, msp" : "=r"(frame));
    if (reporting++)
        aot_stop(3);
    put_str("\nm-fault-");
    put_hex(ipsr & 0x1FFu);
    if ((char *)frame >= __stack_limit && (char *)(frame + 8) <= __stack_top) {
        put_str("-pc-");
        put_hex(frame[6]);
    }
#ifdef AOT_HAS_CFSR
    put_str("-cfsr-");
    put_hex(SCB_CFSR);
#endif
    put_str("\n");
    aot_stop(3);
}

/* The program's end: under qemu (-DAOT_SEMIHOSTING_EXIT) qemu exits with `status`; on a board the
   core sleeps until the next reset. */
void aot_stop(int status)
{
#ifdef AOT_SEMIHOSTING_EXIT
    uint32_t block[2];
    block[0] = 0x20026u; /* ADP_Stopped_ApplicationExit */
    block[1] = (uint32_t)status;
    for (;;) {
        register uint32_t r0 __asm__("r0") = 0x20u; /* SYS_EXIT_EXTENDED */
        register uint32_t *r1 __asm__("r1") = block;
        __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    }
#else
    (void)status;
    for (;;)
        __asm__ volatile("wfi");
#endif
}
