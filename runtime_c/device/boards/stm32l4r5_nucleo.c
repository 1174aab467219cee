/* stm32l4r5_nucleo.c -- board support for the NUCLEO-L4R5ZI (STM32L4R5ZI, Cortex-M4F): the core at
 * 120 MHz and the ST-LINK virtual COM port on LPUART1 (PG7 TX, PG8 RX).
 *
 * Written from the reference manual, not yet run on hardware. Compile-checked only
 * (tests/test_device_boards.py). Sources: RM0432 (STM32L4+ reference manual), UM2179 (STM32
 * Nucleo-144 boards user manual, LPUART1 on PG7/PG8 as the ST-LINK VCP), DS12023 (STM32L4R5xx
 * datasheet, alternate function AF8 = LPUART1 on PG7/PG8).
 *
 * Clock: HSI16 -> PLL (M=2, N=30, R=2) -> 120 MHz SYSCLK = HCLK = PCLK1 = PCLK2. HSI16 is chosen
 * over the board's HSE (the ST-LINK's 8 MHz MCO, which on Nucleo-144 boards depends on solder
 * bridges) so nothing here rests on the board's assembly; it is +-1 % at worst, ample for the
 * UART, and the cycle counter counts cycles whatever the oscillator's error. Above 80 MHz the
 * core needs Range 1 boost mode (RM0432, PWR chapter, "Dynamic voltage scaling management"): the
 * AHB is divided by 2 across the switch and restored after at least 1 us, and the flash needs 5
 * wait states (RM0432, FLASH chapter, read access latency table: Range 1, 100 < HCLK <= 120 MHz).
 */
#include <stdint.h>

#include "aot_device.h"

#ifndef AOT_CLOCK_HZ
#error "define AOT_CLOCK_HZ (the board file's clock_hz)"
#endif
#if AOT_CLOCK_HZ != 120000000
#error "stm32l4r5_nucleo.c sets the PLL for 120 MHz: clock_hz must be 120_000_000"
#endif

#define REG32(addr) (*(volatile uint32_t *)(addr))

/* RCC, 0x4002 1000 (RM0432 memory map; RCC chapter, register descriptions) */
#define RCC_CR REG32(0x40021000u)       /* HSION bit 8, HSIRDY 10, PLLON 24, PLLRDY 25 */
#define RCC_CFGR REG32(0x40021008u)     /* SW[1:0], SWS[3:2], HPRE[7:4], PPRE1[10:8], PPRE2[13:11] */
#define RCC_PLLCFGR REG32(0x4002100Cu)  /* PLLSRC[1:0], PLLM[7:4], PLLN[14:8], PLLREN 24, PLLR[26:25] */
#define RCC_AHB2ENR REG32(0x4002104Cu)  /* GPIOGEN bit 6 */
#define RCC_APB1ENR1 REG32(0x40021058u) /* PWREN bit 28 */
#define RCC_APB1ENR2 REG32(0x4002105Cu) /* LPUART1EN bit 0 */
#define RCC_CCIPR REG32(0x40021088u)    /* LPUART1SEL[11:10], 00 = PCLK1 */

/* PWR, 0x4000 7000 (RM0432 PWR chapter) */
#define PWR_CR2 REG32(0x40007004u)      /* IOSV bit 9, VDDIO2 (port G) valid */
#define PWR_CR5 REG32(0x40007080u)      /* R1MODE bit 8, 0 = Range 1 boost */

/* FLASH, 0x4002 2000 (RM0432 FLASH chapter, FLASH_ACR): LATENCY[3:0], PRFTEN 8, ICEN 9, DCEN 10 */
#define FLASH_ACR REG32(0x40022000u)

/* GPIOG, 0x4800 1800 (RM0432 GPIO chapter) */
#define GPIOG_MODER REG32(0x48001800u)  /* 2 bits a pin, 10 = alternate function */
#define GPIOG_OSPEEDR REG32(0x48001808u)
#define GPIOG_PUPDR REG32(0x4800180Cu)
#define GPIOG_AFRL REG32(0x48001820u)   /* pins 0-7, 4 bits each */
#define GPIOG_AFRH REG32(0x48001824u)   /* pins 8-15 */

/* LPUART1, 0x4000 8000 (RM0432 LPUART chapter) */
#define LPUART1_CR1 REG32(0x40008000u)  /* UE bit 0, RE 2, TE 3 (FIFO off, M = 8 data bits) */
#define LPUART1_BRR REG32(0x4000800Cu)  /* 256 * f_ck / baud, 20 bits, at least 0x300 */

#define BAUD 115200u

static void wait_set(volatile uint32_t *reg, uint32_t mask, uint32_t value)
{
    while ((*reg & mask) != value)
        ;
}

static void clock_120mhz(void)
{
    volatile uint32_t spin;

    RCC_APB1ENR1 |= 1u << 28;                        /* PWR clock, for PWR_CR2/CR5 */
    (void)RCC_APB1ENR1;
    RCC_CR |= 1u << 8;                               /* HSI16 on */
    wait_set(&RCC_CR, 1u << 10, 1u << 10);

    /* Boost: HCLK = SYSCLK / 2 during the switch (boost entry, step 1), R1MODE = 0 (step 2). */
    RCC_CFGR = (RCC_CFGR & ~(0xFu << 4)) | (0x8u << 4);
    PWR_CR5 &= ~(1u << 8);
    /* 5 wait states, prefetch, instruction and data caches (the ART on L4+), before the faster clock. */
    FLASH_ACR = (FLASH_ACR & ~0xFu) | 5u | (1u << 8) | (1u << 9) | (1u << 10);
    wait_set(&FLASH_ACR, 0xFu, 5u);

    /* PLL from HSI16: VCO in 16/2 = 8 MHz (2.66..16), VCO 8*30 = 240 MHz (64..344), R = /2 -> 120 MHz. */
    RCC_CR &= ~(1u << 24);
    wait_set(&RCC_CR, 1u << 25, 0u);
    RCC_PLLCFGR = 2u                                 /* PLLSRC = HSI16 */
                  | ((2u - 1u) << 4)                 /* PLLM = /2 (field is M-1) */
                  | (30u << 8)                       /* PLLN = 30 */
                  | (0u << 25)                       /* PLLR = /2 */
                  | (1u << 24);                      /* PLLREN: R output to SYSCLK */
    RCC_CR |= 1u << 24;
    wait_set(&RCC_CR, 1u << 25, 1u << 25);

    RCC_CFGR = (RCC_CFGR & ~3u) | 3u;                /* SYSCLK = PLL (APB1/APB2 stay /1) */
    wait_set(&RCC_CFGR, 3u << 2, 3u << 2);
    for (spin = 0; spin < 200u; spin++)              /* >= 1 us at 60 MHz HCLK (step 5) */
        ;
    RCC_CFGR &= ~(0xFu << 4);                        /* HCLK = SYSCLK = 120 MHz */
}

static void console_lpuart1(void)
{
    PWR_CR2 |= 1u << 9;                              /* IOSV: PG2..PG15 are on VDDIO2 (PWR_CR2) */
    RCC_AHB2ENR |= 1u << 6;                          /* GPIOG clock */
    RCC_APB1ENR2 |= 1u << 0;                         /* LPUART1 clock */
    (void)RCC_APB1ENR2;
    RCC_CCIPR &= ~(3u << 10);                        /* LPUART1 kernel clock = PCLK1 (120 MHz) */

    /* PG7 = LPUART1_TX, PG8 = LPUART1_RX, both AF8 (DS12023 table "Alternate function AF8 to AF15"). */
    GPIOG_AFRL = (GPIOG_AFRL & ~(0xFu << 28)) | (8u << 28);
    GPIOG_AFRH = (GPIOG_AFRH & ~0xFu) | 8u;
    GPIOG_OSPEEDR |= (2u << 14);                     /* PG7 high speed */
    GPIOG_PUPDR = (GPIOG_PUPDR & ~(3u << 16)) | (1u << 16); /* PG8 pull-up: an idle line reads 1 */
    GPIOG_MODER = (GPIOG_MODER & ~((3u << 14) | (3u << 16))) | (2u << 14) | (2u << 16);

    LPUART1_CR1 = 0;                                 /* 8N1, oversampling fixed, FIFO off */
    LPUART1_BRR = (uint32_t)((256ull * (AOT_CLOCK_HZ) + BAUD / 2u) / BAUD);  /* 266667 */
    LPUART1_CR1 = (1u << 3) | (1u << 2) | 1u;        /* TE, RE, UE */
}

void aot_board_init(void)
{
    clock_120mhz();
    console_lpuart1();
}
