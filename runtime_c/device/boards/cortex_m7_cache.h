/* cortex_m7_cache.h -- the Cortex-M7's L1 caches on, for board support files of M7 chips (STM32F7, H7).
 * After reset both caches are off with undefined contents: invalidate the instruction cache whole and
 * the data cache line by line (set/way), then enable each (Armv7-M Architecture Reference Manual, cache
 * maintenance operations; Cortex-M7 Technical Reference Manual, L1 caches). Not yet run on hardware.
 */
#ifndef AOT_CORTEX_M7_CACHE_H
#define AOT_CORTEX_M7_CACHE_H

#include <stdint.h>

#define M7_REG32(addr) (*(volatile uint32_t *)(addr))
#define M7_SCB_CCR M7_REG32(0xE000ED14u)      /* IC bit 17, DC bit 16 */
#define M7_SCB_CCSIDR M7_REG32(0xE000ED80u)   /* sets [27:13], ways [12:3] of the selected cache */
#define M7_SCB_CSSELR M7_REG32(0xE000ED84u)   /* 0 = level 1 data cache */
#define M7_SCB_ICIALLU M7_REG32(0xE000EF50u)  /* invalidate the whole instruction cache */
#define M7_SCB_DCISW M7_REG32(0xE000EF60u)    /* invalidate a data cache line by set/way */

static void cortex_m7_barrier(void)
{
    __asm__ volatile("dsb\n\tisb" ::: "memory");
}

static void cortex_m7_caches_on(void)
{
    uint32_t ccsidr, sets, ways, set, way;

    cortex_m7_barrier();
    M7_SCB_ICIALLU = 0;
    cortex_m7_barrier();
    M7_SCB_CCR |= 1u << 17;
    cortex_m7_barrier();

    M7_SCB_CSSELR = 0;
    cortex_m7_barrier();
    ccsidr = M7_SCB_CCSIDR;
    sets = ((ccsidr >> 13) & 0x7FFFu) + 1u;
    ways = ((ccsidr >> 3) & 0x3FFu) + 1u;
    for (set = 0; set < sets; set++)          /* 32-byte lines, 4 ways: set at bit 5, way at bit 30 */
        for (way = 0; way < ways; way++)
            M7_SCB_DCISW = (set << 5) | (way << 30);
    cortex_m7_barrier();
    M7_SCB_CCR |= 1u << 16;
    cortex_m7_barrier();
}

#endif
