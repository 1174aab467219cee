/* board.c -- the console: UART0 of the MPS2/MPS3 images, an Arm CMSDK APB UART at UART_BASE (the
 * CMakeLists.txt gives it per board; registers DATA 0x00, STATE 0x04: bit 0 TX full, CTRL 0x08: bit 0
 * TX enable, BAUDDIV 0x10: at least 16), clocked at 25 MHz. qemu connects it to its standard output
 * with -nographic. Replace with your board's UART.
 */
#include <stdint.h>

#include "board.h"

#define UART(offset) (*(volatile uint32_t *)((uintptr_t)(UART_BASE) + (offset)))

void board_init(void)
{
    UART(0x10u) = 25000000u / 115200u;  /* BAUDDIV: the 25 MHz peripheral clock over the baud rate */
    UART(0x08u) = 1u;                   /* TX enable (qemu drops bytes written before it) */
}

void board_putc(char c)
{
    while (UART(0x04u) & 1u)
        ;
    UART(0x00u) = (uint32_t)(unsigned char)c;
}
