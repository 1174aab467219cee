/* stm32_uart.c -- the console's byte I/O on an STM32 USART or LPUART of the register map that the
 * STM32F7, H7 and L4+ families share (ISR 0x1C, ICR 0x20, RDR 0x24, TDR 0x28; each family's reference
 * manual, USART/LPUART register map). The board's own support file sets the peripheral up (clock, pins,
 * baud rate, enable) in aot_board_init; -DAOT_UART_BASE=<address> (the board file's [console] defines)
 * names which one. Written from the reference manuals, not yet run on hardware.
 */
#include <stdint.h>

#include "aot_device.h"

#ifndef AOT_UART_BASE
#error "define AOT_UART_BASE, the U(S)ART's address (the board file's [console] defines)"
#endif

#define UART_REG(offset) (*(volatile uint32_t *)((uintptr_t)(AOT_UART_BASE) + (offset)))
#define UART_ISR UART_REG(0x1Cu)        /* FE 1, NE 2, ORE 3, RXNE 5, TXE 7 */
#define UART_ICR UART_REG(0x20u)        /* FECF 1, NECF 2, ORECF 3 */
#define UART_RDR UART_REG(0x24u)
#define UART_TDR UART_REG(0x28u)

#define ISR_ERRORS 0xEu                 /* FE | NE | ORE */
#define ISR_RXNE (1u << 5)
#define ISR_TXE (1u << 7)

void aot_console_putc(int c)
{
    while (!(UART_ISR & ISR_TXE))
        ;
    UART_TDR = (uint32_t)(unsigned char)c;
}

int aot_console_getc(void)
{
    for (;;) {
        uint32_t isr = UART_ISR;
        if (isr & ISR_RXNE)
            return (int)(UART_RDR & 0xFFu);
        if (isr & ISR_ERRORS)
            UART_ICR = ISR_ERRORS;      /* an overrun stops reception until cleared */
    }
}
