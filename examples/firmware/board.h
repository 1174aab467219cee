/* board.h -- what the firmware needs from its board: a console to print on. */
#ifndef BOARD_H
#define BOARD_H

void board_init(void);
void board_putc(char c);

#endif
