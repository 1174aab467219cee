/* stm32h7a3_nucleo.c -- board support for the NUCLEO-H7A3ZI-Q (STM32H7A3ZI-Q, Cortex-M7): the core
 * at 280 MHz and the ST-LINK virtual COM port on USART3 (PD8 TX, PD9 RX).
 *
 * Written from the reference manual, not yet run on hardware. Compile-checked only
 * (tests/test_device_boards.py). Sources: RM0455 (STM32H7A3/7B3/7B0 reference manual), UM2407
 * (STM32H7 Nucleo-144 boards user manual: USART3 PD8/PD9 as the VCP, the -Q board's SMPS), ST's
 * STM32CubeH7 device header stm32h7a3xxq.h for the register offsets (RCC_AHB4ENR at 0x140 and
 * RCC_APB1LENR at 0x148 on this part, not the STM32H743's 0x0E0/0x0E8) and stm32h7xx_hal_pwr.h
 * for the voltage-scale encoding, which is reversed from the STM32H743's.
 *
 * Power first, or the chip locks: the -Q board feeds VCORE from the on-chip SMPS ("direct SMPS
 * supply", the board's default assembly), so PWR_CR3 is written once with SMPSEN set and LDOEN and
 * BYPASS clear. PWR_CR3's supply fields can be written only once after power-on; a supply choice
 * that does not match the board's wiring stops the core until the next power cycle. Then voltage
 * scale 1, then scale 0 (scale 0 is reachable only from scale 1), which allows 280 MHz.
 *
 * Clock: HSI (64 MHz) /8 -> PLL1 (input 8 MHz, range 8-16 MHz, wide VCO, N=70 -> 560 MHz, P=/2)
 * -> 280 MHz sys_ck = CPU clock; AHB /2 = 140 MHz; APB1/2/3/4 /2 = 70 MHz. Flash: 6 wait states at
 * VOS0 (RM0455, flash chapter, read latency table). HSI rather than the ST-LINK's 8 MHz MCO, so
 * the board's solder bridges do not matter. Then the Cortex-M7 L1 instruction and data caches.
 */
#include <stdint.h>

#include "aot_device.h"
#include "cortex_m7_cache.h"

#ifndef AOT_CLOCK_HZ
#error "define AOT_CLOCK_HZ (the board file's clock_hz)"
#endif
#if AOT_CLOCK_HZ != 280000000
#error "stm32h7a3_nucleo.c sets PLL1 for 280 MHz: clock_hz must be 280_000_000"
#endif

#define REG32(addr) (*(volatile uint32_t *)(addr))

/* RCC, 0x5802 4400 (RM0455 memory map, SRD AHB4; RCC chapter) */
#define RCC_CR REG32(0x58024400u)        /* HSION 0, HSIRDY 2, HSIDIV[4:3], PLL1ON 24, PLL1RDY 25 */
#define RCC_CFGR REG32(0x58024410u)      /* SW[2:0], SWS[5:3]: 3 = PLL1 */
#define RCC_CDCFGR1 REG32(0x58024418u)   /* HPRE[3:0], CDPPRE[6:4], CDCPRE[11:8] */
#define RCC_CDCFGR2 REG32(0x5802441Cu)   /* CDPPRE1[6:4], CDPPRE2[10:8] */
#define RCC_SRDCFGR REG32(0x58024420u)   /* SRDPPRE[6:4] */
#define RCC_PLLCKSELR REG32(0x58024428u) /* PLLSRC[1:0] (0 = HSI), DIVM1[9:4] (the divider itself) */
#define RCC_PLLCFGR REG32(0x5802442Cu)   /* PLL1FRACEN 0, PLL1VCOSEL 1, PLL1RGE[3:2], DIVP1EN 16 */
#define RCC_PLL1DIVR REG32(0x58024430u)  /* DIVN1[8:0], DIVP1[15:9], DIVQ1[22:16], DIVR1[30:24], value-1 */
#define RCC_CDCCIP2R REG32(0x58024454u)  /* USART234578SEL[2:0], 0 = rcc_pclk1 */
#define RCC_AHB4ENR REG32(0x58024540u)   /* GPIODEN bit 3 */
#define RCC_APB1LENR REG32(0x58024548u)  /* USART3EN bit 18 */

/* PWR, 0x5802 4800 (RM0455 PWR chapter) */
#define PWR_CSR1 REG32(0x58024804u)      /* ACTVOSRDY bit 13 */
#define PWR_CR3 REG32(0x5802480Cu)       /* BYPASS 0, LDOEN 1, SMPSEN 2, SMPSEXTHP 3, SMPSLEVEL[5:4] */
#define PWR_SRDCR REG32(0x58024818u)     /* VOS[15:14] (11 = scale 0, 10 = scale 1), VOSRDY 13 */

/* FLASH registers, 0x5200 2000 (RM0455 flash chapter, FLASH_ACR: LATENCY[3:0]) */
#define FLASH_ACR REG32(0x52002000u)

/* GPIOD, 0x5802 0C00 (RM0455 GPIO chapter) */
#define GPIOD_MODER REG32(0x58020C00u)   /* 2 bits a pin, 10 = alternate function */
#define GPIOD_OSPEEDR REG32(0x58020C08u)
#define GPIOD_PUPDR REG32(0x58020C0Cu)
#define GPIOD_AFRH REG32(0x58020C24u)    /* pins 8-15, 4 bits each */

/* USART3, 0x4000 4800 (RM0455 USART chapter; FIFO mode left off) */
#define USART3_CR1 REG32(0x40004800u)    /* UE 0, RE 2, TE 3 */
#define USART3_BRR REG32(0x4000480Cu)    /* usart_ker_ck / baud with 16x oversampling, PRESC = 1 */

/* Cortex-M7 system control space (ARMv7-M ARM B3.2; Cortex-M7 TRM, L1 cache) */

#define BAUD 115200u
#define PCLK1_HZ ((AOT_CLOCK_HZ) / 4u)   /* CPU 280 -> AHB /2 -> APB1 /2 */

static void wait_set(volatile uint32_t *reg, uint32_t mask, uint32_t value)
{
    while ((*reg & mask) != value)
        ;
}

static void power_smps_vos0(void)
{
    /* Direct SMPS: keep SMPSEN, clear LDOEN and BYPASS, in one write (the fields lock after it). */
    PWR_CR3 = (PWR_CR3 & ~((1u << 0) | (1u << 1) | (1u << 3) | (3u << 4))) | (1u << 2);
    wait_set(&PWR_CSR1, 1u << 13, 1u << 13);         /* ACTVOSRDY: the supply is settled */
    PWR_SRDCR = (PWR_SRDCR & ~(3u << 14)) | (2u << 14);  /* scale 1 */
    wait_set(&PWR_SRDCR, 1u << 13, 1u << 13);
    PWR_SRDCR = (PWR_SRDCR & ~(3u << 14)) | (3u << 14);  /* scale 0 */
    wait_set(&PWR_SRDCR, 1u << 13, 1u << 13);
}

static void clock_280mhz(void)
{
    RCC_CR = (RCC_CR & ~(3u << 3)) | 1u;             /* HSI on, HSIDIV = /1: 64 MHz */
    wait_set(&RCC_CR, 1u << 2, 1u << 2);

    RCC_CR &= ~(1u << 24);                           /* PLL1 off while it is set up */
    wait_set(&RCC_CR, 1u << 25, 0u);
    RCC_PLLCKSELR = (RCC_PLLCKSELR & ~((3u << 0) | (0x3Fu << 4))) | (0u << 0) | (8u << 4);  /* HSI / 8 */
    RCC_PLLCFGR = (RCC_PLLCFGR & ~((1u << 0) | (1u << 1) | (3u << 2)))
                  | (0u << 1)                        /* wide VCO */
                  | (3u << 2)                        /* input range 8-16 MHz */
                  | (1u << 16);                      /* DIVP1EN */
    RCC_PLL1DIVR = (70u - 1u)                        /* N = 70: VCO 560 MHz */
                   | ((2u - 1u) << 9)                /* P = 2: 280 MHz */
                   | ((4u - 1u) << 16)               /* Q = 4 (unused here) */
                   | ((2u - 1u) << 24);              /* R = 2 (unused here) */
    RCC_CR |= 1u << 24;

    FLASH_ACR = (FLASH_ACR & ~0xFu) | 6u;            /* 6 wait states at VOS0, 280 MHz */
    wait_set(&FLASH_ACR, 0xFu, 6u);
    RCC_CDCFGR1 = (RCC_CDCFGR1 & ~((0xFu << 8) | (7u << 4) | 0xFu))
                  | (0u << 8)                        /* CPU = sys_ck */
                  | (4u << 4)                        /* CDPPRE (APB3) = /2 */
                  | 0x8u;                            /* HPRE (AHB) = /2 */
    RCC_CDCFGR2 = (RCC_CDCFGR2 & ~((7u << 4) | (7u << 8))) | (4u << 4) | (4u << 8);  /* APB1, APB2 /2 */
    RCC_SRDCFGR = (RCC_SRDCFGR & ~(7u << 4)) | (4u << 4);                           /* APB4 /2 */

    wait_set(&RCC_CR, 1u << 25, 1u << 25);
    RCC_CFGR = (RCC_CFGR & ~7u) | 3u;                /* sys_ck = PLL1 P */
    wait_set(&RCC_CFGR, 7u << 3, 3u << 3);
}

static void console_usart3(void)
{
    RCC_AHB4ENR |= 1u << 3;                          /* GPIOD clock */
    RCC_APB1LENR |= 1u << 18;                        /* USART3 clock */
    (void)RCC_APB1LENR;
    RCC_CDCCIP2R &= ~7u;                             /* USART3 kernel clock = PCLK1 (70 MHz) */

    /* PD8 = USART3_TX, PD9 = USART3_RX, AF7. */
    GPIOD_AFRH = (GPIOD_AFRH & ~0xFFu) | 7u | (7u << 4);
    GPIOD_OSPEEDR |= 2u << 16;
    GPIOD_PUPDR = (GPIOD_PUPDR & ~(3u << 18)) | (1u << 18);
    GPIOD_MODER = (GPIOD_MODER & ~((3u << 16) | (3u << 18))) | (2u << 16) | (2u << 18);

    USART3_CR1 = 0;                                  /* 8N1, 16x oversampling, FIFO off */
    USART3_BRR = (PCLK1_HZ + BAUD / 2u) / BAUD;      /* 70 MHz / 115200 -> 608 */
    USART3_CR1 = (1u << 3) | (1u << 2) | 1u;         /* TE, RE, UE */
}

void aot_board_init(void)
{
    power_smps_vos0();
    clock_280mhz();
    cortex_m7_caches_on();
    console_usart3();
}
