/* aot_device.h -- what a board gives aot's device harness (harness.c.j2, startup.c).
 *
 * A microcontroller board file names the C sources that define these three functions
 * (`[console] sources`): the shipped CMSDK UART driver for the boards qemu emulates, a board's
 * own support file for the others. They are compiled with the board's target flags and with
 * -DAOT_CLOCK_HZ=<the board's clock_hz> plus the board's `[console] defines`.
 *
 * The harness calls aot_board_init() once, from the reset handler, after .data and .bss are
 * set up and the FPU is on, and before anything is printed. The harness is single-threaded and
 * uses no interrupts other than SysTick (to extend its counter), so a polled driver is right.
 */
#ifndef AOT_DEVICE_H
#define AOT_DEVICE_H

/* Bring the core to AOT_CLOCK_HZ (PLL, flash wait states, caches) and make the console usable
   (its clock, pins and baud rate). */
void aot_board_init(void);

/* Send one byte on the console, waiting while the transmitter is full. */
void aot_console_putc(int c);

/* Wait for one byte from the console and return it (0..255). */
int aot_console_getc(void);

/* Provided by startup.c: end the program (under qemu, qemu exits with `status`; on a board the
   core sleeps until it is reset). */
void aot_stop(int status) __attribute__((noreturn));

#endif
