/* nrf52840_dk.c -- board support for the nRF52840 DK (PCA10056; nRF52840, Cortex-M4F at 64 MHz):
 * the crystal oscillator for HFCLK and the J-Link OB virtual COM port on UART0 (TX P0.06, RX P0.08).
 *
 * Written from the reference manual, not yet run on hardware. Compile-checked only
 * (tests/test_device_boards.py). Sources: nRF52840 Product Specification v1.x (memory map,
 * CLOCK, NVMC, GPIO, UART chapters) and the nRF52840 DK user guide (VCOM: TXD P0.06, RXD P0.08,
 * RTS P0.05, CTS P0.07; flow control is not used here).
 *
 * Clock: the CPU always runs at 64 MHz from HFCLK; at reset HFCLK comes from the internal RC
 * oscillator (HFINT, +-1.5 % or so). aot_board_init starts the 32 MHz crystal (HFXO) so that the
 * UART's baud rate and any time computed from cycle counts rest on the crystal, and turns on the
 * flash instruction cache (NVMC ICACHECNF), off after reset. There is no PLL or wait state to set.
 *
 * The console uses the legacy UART peripheral (the "deprecated" UART at the same address as
 * UARTE0), which is polled byte by byte without EasyDMA; it is still in the nRF52840 silicon.
 */
#include <stdint.h>

#include "aot_device.h"

#ifndef AOT_CLOCK_HZ
#error "define AOT_CLOCK_HZ (the board file's clock_hz)"
#endif
#if AOT_CLOCK_HZ != 64000000
#error "the nRF52840 runs at 64 MHz: clock_hz must be 64_000_000"
#endif

#define REG32(addr) (*(volatile uint32_t *)(addr))

/* CLOCK, 0x4000 0000 (Product Specification, CLOCK registers) */
#define CLOCK_TASKS_HFCLKSTART REG32(0x40000000u)
#define CLOCK_EVENTS_HFCLKSTARTED REG32(0x40000100u)

/* NVMC, 0x4001 E000: ICACHECNF at 0x540, CACHEEN bit 0 */
#define NVMC_ICACHECNF REG32(0x4001E540u)

/* GPIO P0, 0x5000 0000: OUTSET 0x508, DIRSET 0x518, PIN_CNF[n] 0x700 + 4n */
#define P0_OUTSET REG32(0x50000508u)
#define P0_PIN_CNF(n) REG32(0x50000700u + 4u * (n))

/* UART0, 0x4000 2000 (Product Specification, UART registers) */
#define UART0_TASKS_STARTRX REG32(0x40002000u)
#define UART0_TASKS_STARTTX REG32(0x40002008u)
#define UART0_EVENTS_RXDRDY REG32(0x40002108u)
#define UART0_EVENTS_TXDRDY REG32(0x4000211Cu)
#define UART0_EVENTS_ERROR REG32(0x40002124u)
#define UART0_ERRORSRC REG32(0x40002480u)  /* OVERRUN 0, PARITY 1, FRAMING 2, BREAK 3; write 1 to clear */
#define UART0_ENABLE REG32(0x40002500u)    /* 4 = UART */
#define UART0_PSELRTS REG32(0x40002508u)
#define UART0_PSELTXD REG32(0x4000250Cu)
#define UART0_PSELCTS REG32(0x40002510u)
#define UART0_PSELRXD REG32(0x40002514u)
#define UART0_RXD REG32(0x40002518u)
#define UART0_TXD REG32(0x4000251Cu)
#define UART0_BAUDRATE REG32(0x40002524u)  /* 0x01D7E000 = 115200 baud */
#define UART0_CONFIG REG32(0x4000256Cu)    /* HWFC 0, PARITY[3:1], STOP 4: 0 = 8N1 without flow control */

#define TX_PIN 6u
#define RX_PIN 8u
#define PSEL_DISCONNECTED 0xFFFFFFFFu
#define BAUD_115200 0x01D7E000u

void aot_board_init(void)
{
    CLOCK_EVENTS_HFCLKSTARTED = 0;
    CLOCK_TASKS_HFCLKSTART = 1;                      /* HFXO: 32 MHz crystal */
    while (CLOCK_EVENTS_HFCLKSTARTED == 0)
        ;
    NVMC_ICACHECNF |= 1u;                            /* flash instruction cache on */

    P0_OUTSET = 1u << TX_PIN;                        /* TX idles high */
    P0_PIN_CNF(TX_PIN) = 1u | (1u << 1);             /* output, input buffer disconnected */
    P0_PIN_CNF(RX_PIN) = (3u << 2);                  /* input, buffer connected, pull-up */

    UART0_ENABLE = 0;
    UART0_PSELRTS = PSEL_DISCONNECTED;
    UART0_PSELCTS = PSEL_DISCONNECTED;
    UART0_PSELTXD = TX_PIN;                          /* port 0 (bit 5 clear), connected (bit 31 clear) */
    UART0_PSELRXD = RX_PIN;
    UART0_CONFIG = 0;
    UART0_BAUDRATE = BAUD_115200;
    UART0_ENABLE = 4u;
    UART0_EVENTS_RXDRDY = 0;
    UART0_EVENTS_TXDRDY = 0;
    UART0_TASKS_STARTTX = 1;
    UART0_TASKS_STARTRX = 1;
}

void aot_console_putc(int c)
{
    UART0_EVENTS_TXDRDY = 0;
    UART0_TXD = (uint32_t)(unsigned char)c;
    while (UART0_EVENTS_TXDRDY == 0)
        ;
}

int aot_console_getc(void)
{
    while (UART0_EVENTS_RXDRDY == 0)
        if (UART0_EVENTS_ERROR) {                    /* overrun, framing, break: clear and go on */
            UART0_ERRORSRC = UART0_ERRORSRC;
            UART0_EVENTS_ERROR = 0;
        }
    UART0_EVENTS_RXDRDY = 0;
    return (int)(UART0_RXD & 0xFFu);
}
