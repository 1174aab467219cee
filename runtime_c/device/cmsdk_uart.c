/* cmsdk_uart.c -- console on an Arm CMSDK APB UART: the mps2/mps3 FPGA boards (AN386, AN500, AN547,
 * Corstone-300 AN552) and qemu's models of them. No clock set-up: these boards run at a fixed clock.
 *
 * -DAOT_UART_BASE=<address> names the UART (mps2-an386 UART0: 0x40004000; mps3-an547 UART0 seen
 * from the Secure state the core starts in: 0x59303000). -DAOT_UART_CLOCK_HZ=<Hz> gives the UART's
 * APB clock where it differs from the core's AOT_CLOCK_HZ (the MPS3 Corstone-300 FPGA images:
 * core 32 MHz, peripherals 25 MHz). Registers (CMSDK TRM, DDI 0479, 4.3):
 * DATA 0x00, STATE 0x04 (bit 0 TX full, bit 1 RX full, bits 2-3 overruns), CTRL 0x08 (bit 0 TX
 * enable, bit 1 RX enable), BAUDDIV 0x10 (at least 16). qemu drops what is written while TX
 * enable is clear, so it is set before the first byte.
 */
#include <stdint.h>

#include "aot_device.h"

#ifndef AOT_UART_BASE
#error "define AOT_UART_BASE, the CMSDK UART's address (the board file's [console] defines)"
#endif
#ifndef AOT_CLOCK_HZ
#error "define AOT_CLOCK_HZ, the UART's clock (the board file's clock_hz)"
#endif
#ifndef AOT_UART_CLOCK_HZ
#define AOT_UART_CLOCK_HZ AOT_CLOCK_HZ
#endif
#ifndef AOT_UART_BAUD
#define AOT_UART_BAUD 115200u
#endif

#define UART_REG(offset) (*(volatile uint32_t *)((uintptr_t)(AOT_UART_BASE) + (offset)))
#define UART_DATA UART_REG(0x00u)
#define UART_STATE UART_REG(0x04u)
#define UART_CTRL UART_REG(0x08u)
#define UART_BAUDDIV UART_REG(0x10u)

#define STATE_TX_FULL 1u
#define STATE_RX_FULL 2u
#define STATE_OVERRUNS 0xCu

void aot_board_init(void)
{
    uint32_t div = (uint32_t)(AOT_UART_CLOCK_HZ) / (AOT_UART_BAUD);
    UART_BAUDDIV = div < 16u ? 16u : div;
    UART_CTRL = 3u; /* TX and RX enable */
}

void aot_console_putc(int c)
{
    while (UART_STATE & STATE_TX_FULL)
        ;
    UART_DATA = (uint32_t)(unsigned char)c;
}

int aot_console_getc(void)
{
    while (!(UART_STATE & STATE_RX_FULL))
        if (UART_STATE & STATE_OVERRUNS)
            UART_STATE = STATE_OVERRUNS; /* write 1 to clear, or the receiver stops */
    return (int)(UART_DATA & 0xFFu);
}
