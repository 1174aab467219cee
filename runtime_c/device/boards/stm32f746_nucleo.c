/* stm32f746_nucleo.c -- board support for the NUCLEO-F746ZG (STM32F746ZG, Cortex-M7): the core at
 * 216 MHz (over-drive) and the ST-LINK virtual COM port on USART3 (PD8 TX, PD9 RX).
 *
 * Written from the reference manual, not yet run on hardware. Compile-checked only
 * (tests/test_device_boards.py). Sources: RM0385 (STM32F75xxx/F74xxx reference manual), UM1974
 * (STM32 Nucleo-144 boards user manual, USART3 on PD8/PD9 as the ST-LINK VCP), DS10916
 * (STM32F745xx/F746xx datasheet, AF7 = USART3 on PD8/PD9), ARMv7-M ARM and the Cortex-M7 TRM for
 * the caches.
 *
 * Clock: HSI (16 MHz) -> PLL (M=8, N=216, P=2, Q=9) -> 216 MHz SYSCLK = HCLK, PCLK1 = 54 MHz
 * (APB1 at most 54 MHz), PCLK2 = 108 MHz. HSI rather than the ST-LINK's 8 MHz MCO on HSE, so the
 * solder-bridge state of the board does not matter. 216 MHz needs voltage scale 1 and over-drive,
 * entered in RM0385's order (PWR chapter, "Entering Over-drive mode": PLL on, ODEN, ODRDY, ODSWEN,
 * ODSWRDY, then flash latency, prescalers and the switch), and 7 flash wait states (RM0385, flash
 * chapter, wait states table: 2.7-3.6 V, 210 < HCLK <= 216 MHz). Then the ART accelerator and
 * prefetch, and the Cortex-M7 L1 instruction and data caches.
 */
#include <stdint.h>

#include "aot_device.h"
#include "cortex_m7_cache.h"

#ifndef AOT_CLOCK_HZ
#error "define AOT_CLOCK_HZ (the board file's clock_hz)"
#endif
#if AOT_CLOCK_HZ != 216000000
#error "stm32f746_nucleo.c sets the PLL for 216 MHz: clock_hz must be 216_000_000"
#endif

#define REG32(addr) (*(volatile uint32_t *)(addr))

/* RCC, 0x4002 3800 (RM0385 memory map; RCC chapter) */
#define RCC_CR REG32(0x40023800u)       /* HSION 0, HSIRDY 1, PLLON 24, PLLRDY 25 */
#define RCC_PLLCFGR REG32(0x40023804u)  /* PLLM[5:0], PLLN[14:6], PLLP[17:16], PLLSRC 22, PLLQ[27:24] */
#define RCC_CFGR REG32(0x40023808u)     /* SW[1:0], SWS[3:2], HPRE[7:4], PPRE1[12:10], PPRE2[15:13] */
#define RCC_AHB1ENR REG32(0x40023830u)  /* GPIODEN bit 3 */
#define RCC_APB1ENR REG32(0x40023840u)  /* USART3EN bit 18, PWREN bit 28 */
#define RCC_DCKCFGR2 REG32(0x40023890u) /* USART3SEL[5:4], 00 = PCLK1 */

/* PWR, 0x4000 7000 (RM0385 PWR chapter) */
#define PWR_CR1 REG32(0x40007000u)      /* ODEN 16, ODSWEN 17, VOS[15:14] (11 = scale 1) */
#define PWR_CSR1 REG32(0x40007004u)     /* ODRDY 16, ODSWRDY 17 */

/* FLASH, 0x4002 3C00 (RM0385 flash chapter, FLASH_ACR): LATENCY[3:0], PRFTEN 8, ARTEN 9 */
#define FLASH_ACR REG32(0x40023C00u)

/* GPIOD, 0x4002 0C00 (RM0385 GPIO chapter) */
#define GPIOD_MODER REG32(0x40020C00u)  /* 2 bits a pin, 10 = alternate function */
#define GPIOD_OSPEEDR REG32(0x40020C08u)
#define GPIOD_PUPDR REG32(0x40020C0Cu)
#define GPIOD_AFRH REG32(0x40020C24u)   /* pins 8-15, 4 bits each */

/* USART3, 0x4000 4800 (RM0385 USART chapter) */
#define USART3_CR1 REG32(0x40004800u)   /* UE 0, RE 2, TE 3 (M = 8 data bits, OVER8 = 0) */
#define USART3_BRR REG32(0x4000480Cu)   /* f_ck / baud with 16x oversampling */

/* Cortex-M7 system control space (ARMv7-M ARM B3.2; Cortex-M7 TRM, L1 cache) */

#define BAUD 115200u
#define PCLK1_HZ ((AOT_CLOCK_HZ) / 4u)

static void wait_set(volatile uint32_t *reg, uint32_t mask, uint32_t value)
{
    while ((*reg & mask) != value)
        ;
}

static void clock_216mhz(void)
{
    RCC_APB1ENR |= 1u << 28;                         /* PWR clock */
    (void)RCC_APB1ENR;
    PWR_CR1 = (PWR_CR1 & ~(3u << 14)) | (3u << 14);  /* voltage scale 1 */
    RCC_CR |= 1u;                                    /* HSI on (it is the reset clock) */
    wait_set(&RCC_CR, 1u << 1, 1u << 1);

    /* PLL from HSI: VCO in 16/8 = 2 MHz, VCO 2*216 = 432 MHz (100..432), P = /2 -> 216 MHz, Q = /9 -> 48 MHz. */
    RCC_CR &= ~(1u << 24);
    wait_set(&RCC_CR, 1u << 25, 0u);
    RCC_PLLCFGR = 8u                                 /* PLLM = 8 */
                  | (216u << 6)                      /* PLLN = 216 */
                  | (0u << 16)                       /* PLLP = /2 */
                  | (0u << 22)                       /* PLLSRC = HSI */
                  | (9u << 24);                      /* PLLQ = 9 */
    RCC_CR |= 1u << 24;

    PWR_CR1 |= 1u << 16;                             /* over-drive on */
    wait_set(&PWR_CSR1, 1u << 16, 1u << 16);
    PWR_CR1 |= 1u << 17;                             /* switch the regulator to over-drive */
    wait_set(&PWR_CSR1, 1u << 17, 1u << 17);

    FLASH_ACR = (FLASH_ACR & ~0xFu) | 7u | (1u << 8) | (1u << 9);  /* 7 WS, prefetch, ART */
    wait_set(&FLASH_ACR, 0xFu, 7u);
    RCC_CFGR = (RCC_CFGR & ~((0xFu << 4) | (7u << 10) | (7u << 13)))
               | (0u << 4)                           /* HCLK = SYSCLK */
               | (5u << 10)                          /* PCLK1 = HCLK / 4 = 54 MHz */
               | (4u << 13);                         /* PCLK2 = HCLK / 2 = 108 MHz */
    wait_set(&RCC_CR, 1u << 25, 1u << 25);
    RCC_CFGR = (RCC_CFGR & ~3u) | 2u;                /* SYSCLK = PLL */
    wait_set(&RCC_CFGR, 3u << 2, 2u << 2);
}

static void console_usart3(void)
{
    RCC_AHB1ENR |= 1u << 3;                          /* GPIOD clock */
    RCC_APB1ENR |= 1u << 18;                         /* USART3 clock */
    (void)RCC_APB1ENR;
    RCC_DCKCFGR2 &= ~(3u << 4);                      /* USART3 kernel clock = PCLK1 */

    /* PD8 = USART3_TX, PD9 = USART3_RX, AF7. */
    GPIOD_AFRH = (GPIOD_AFRH & ~0xFFu) | 7u | (7u << 4);
    GPIOD_OSPEEDR |= 2u << 16;                       /* PD8 high speed */
    GPIOD_PUPDR = (GPIOD_PUPDR & ~(3u << 18)) | (1u << 18);  /* PD9 pull-up */
    GPIOD_MODER = (GPIOD_MODER & ~((3u << 16) | (3u << 18))) | (2u << 16) | (2u << 18);

    USART3_CR1 = 0;                                  /* 8N1, 16x oversampling */
    USART3_BRR = (PCLK1_HZ + BAUD / 2u) / BAUD;      /* 54 MHz / 115200 -> 469 */
    USART3_CR1 = (1u << 3) | (1u << 2) | 1u;         /* TE, RE, UE */
}

void aot_board_init(void)
{
    clock_216mhz();
    cortex_m7_caches_on();
    console_usart3();
}
