/* cortex_m_vectors.h -- the Cortex-M vector table both start-up files place at reset's address
 * (baremetal/startup.c under qemu with semihosting, device/startup.c on a board): every exception but
 * reset goes to Fault_Handler unless a program defines its own handler (the device harness's SysTick).
 * No device interrupts are used. Include it in the start-up file only: it defines aot_vectors. The
 * includer defines Reset_Handler and Fault_Handler; its linker script, __stack_top and .vectors.
 */
#ifndef AOT_CORTEX_M_VECTORS_H
#define AOT_CORTEX_M_VECTORS_H

extern char __stack_top[];
void Reset_Handler(void) __attribute__((noreturn));

void NMI_Handler(void) __attribute__((weak, alias("Fault_Handler")));
void HardFault_Handler(void) __attribute__((weak, alias("Fault_Handler")));
void MemManage_Handler(void) __attribute__((weak, alias("Fault_Handler")));
void BusFault_Handler(void) __attribute__((weak, alias("Fault_Handler")));
void UsageFault_Handler(void) __attribute__((weak, alias("Fault_Handler")));
void SecureFault_Handler(void) __attribute__((weak, alias("Fault_Handler")));
void SVC_Handler(void) __attribute__((weak, alias("Fault_Handler")));
void DebugMon_Handler(void) __attribute__((weak, alias("Fault_Handler")));
void PendSV_Handler(void) __attribute__((weak, alias("Fault_Handler")));
void SysTick_Handler(void) __attribute__((weak, alias("Fault_Handler")));

typedef void (*aot_handler)(void);
struct aot_vector_table {
    void *initial_sp;
    aot_handler handler[15];
};

__attribute__((section(".vectors"), used)) const struct aot_vector_table aot_vectors = {
    __stack_top,
    {
        Reset_Handler, NMI_Handler, HardFault_Handler, MemManage_Handler, BusFault_Handler,
        UsageFault_Handler, SecureFault_Handler, 0, 0, 0, SVC_Handler, DebugMon_Handler, 0,
        PendSV_Handler, SysTick_Handler,
    },
};

#endif
