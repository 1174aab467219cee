/* startup.c -- what runs before main() on a Cortex-M: the vector table (initial stack pointer, reset
 * handler, fault handlers), .data copied from flash, .bss zeroed, the FPU switched on (the model is
 * compiled for the hard-float ABI and faults without it). Adapt the vector table to your chip.
 */
#include <stdint.h>

#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)

extern uint32_t __data_load[], __data_start[], __data_end[], __bss_start[], __bss_end[];
extern char __stack_top[];

int main(void);
void Reset_Handler(void) __attribute__((noreturn));
void Fault_Handler(void) __attribute__((noreturn));

typedef void (*handler)(void);

__attribute__((section(".vectors"), used)) const struct {
    void *initial_sp;
    handler handlers[15];
} vectors = {
    __stack_top,
    {Reset_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler, Fault_Handler, 0, 0, 0, 0,
     Fault_Handler, Fault_Handler, 0, Fault_Handler, Fault_Handler},
};

void Reset_Handler(void)
{
    uint32_t *src = __data_load, *dst = __data_start;
    while (dst < __data_end)
        *dst++ = *src++;
    for (dst = __bss_start; dst < __bss_end;)
        *dst++ = 0;
#if defined(__ARM_FP)
    SCB_CPACR |= 0xFu << 20;    /* CP10 and CP11: the FPU */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    main();
    for (;;)
        __asm__ volatile("wfi");
}

void Fault_Handler(void)
{
    for (;;)
        __asm__ volatile("wfi");
}
