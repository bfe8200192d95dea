"""chat_en: hand-written English conversations (part C: everyday life, learning, creative)."""

CONVERSATIONS = [
[
("user", r'''
Give me a simple weeknight dal recipe. I have red lentils, onion, garlic, ginger, canned tomatoes and basic spices.
'''),
("assistant", r'''
**Quick red lentil dal** (serves 3–4, about 30 minutes)

**Ingredients**
- 1 cup (about 200 g) red lentils
- 3 cups (750 ml) water, plus more as needed
- 1 onion, finely chopped
- 3 cloves garlic, minced
- A thumb-sized piece of ginger, grated
- 1/2 can (about 200 g) chopped tomatoes
- 2 tbsp oil or ghee
- 1 tsp cumin seeds (or 1 tsp ground cumin)
- 1 tsp ground turmeric
- 1 tsp ground coriander (optional)
- 1/2 tsp chilli powder or flakes, to taste
- 1 tsp salt, adjusted at the end
- Lemon juice and fresh coriander to finish (optional)

**Method**
1. **Rinse the lentils** in a sieve until the water runs mostly clear.
2. **Simmer the lentils:** put them in a pot with the water and turmeric, bring to a boil, skim off any foam, then simmer partly covered for 15–20 minutes, stirring now and then, until soft and falling apart. Add a splash more water if it gets too thick.
3. **Meanwhile, make the base:** heat the oil in a pan over medium heat. Add the cumin seeds and let them sizzle for about 30 seconds, until fragrant.
4. Add the onion and cook 6–8 minutes until soft and golden.
5. Add the garlic and ginger and cook 1 minute, then the ground coriander and chilli for another 30 seconds.
6. Add the tomatoes and cook 5 minutes until they break down and the oil starts to separate.
7. **Combine:** stir the tomato mixture into the lentils. Simmer 5 more minutes. Season with salt, add a squeeze of lemon, and adjust the thickness with water.

Serve with rice or flatbread. It keeps for 4 days in the fridge and tastes even better the next day; it thickens as it sits, so add water when reheating.

**Optional upgrade:** at the end, fry a few sliced garlic cloves and a pinch of chilli flakes in a spoonful of oil or ghee and pour it over the top (a *tadka*). It takes two minutes and makes it taste like restaurant dal.
'''),
],
[
("user", r'''
Plan me a 3-day trip to Kyoto. I like temples, food and walking, not so much shopping. First time in Japan.
'''),
("assistant", r'''
Here's a walking-friendly plan that groups sights by area, so you're not criss-crossing the city.

**Day 1: Southern Higashiyama and Gion**
- **Early morning: Fushimi Inari Taisha.** Go around 7–8 am, before the crowds. The famous tunnels of orange torii gates continue up Mount Inari; walking to the Yotsutsuji intersection (roughly 30–45 minutes up) gives a great view without doing the full loop.
- **Late morning: Kiyomizu-dera**, the temple with the huge wooden stage overlooking the city.
- **Afternoon: walk down Sannenzaka and Ninenzaka**, preserved old streets with small shops and tea houses, then continue north past **Kōdai-ji** toward **Yasaka Shrine**.
- **Evening: Gion and Pontochō.** Stroll Hanamikōji Street at dusk, then dinner in the narrow Pontochō alley along the river.

**Day 2: Arashiyama (west)**
- **Morning: Arashiyama bamboo grove**, again, early is much better.
- **Tenryū-ji**, a Zen temple whose garden is a UNESCO World Heritage site, right next to the bamboo.
- Walk along the **Katsura River** and over the **Togetsukyō Bridge**.
- **Lunch:** try *yudōfu* (simmered tofu), a Kyoto speciality popular in this area.
- **Afternoon: Kinkaku-ji** (the Golden Pavilion), a short taxi or bus ride away, then **Ryōan-ji** nearby for its famous rock garden.

**Day 3: Central Kyoto and the Philosopher's Path**
- **Morning: Nishiki Market**, a covered food street, ideal for grazing: pickles, grilled skewers, tamagoyaki, matcha sweets.
- **Late morning: Ginkaku-ji** (the Silver Pavilion).
- **Walk the Philosopher's Path**, a canal-side path of about 2 km heading south, lined with cherry trees and small temples.
- **End at Nanzen-ji**, with its huge gate and the brick aqueduct on the grounds.

**First-time tips**
- Get an IC card (such as ICOCA) for buses and trains; Kyoto buses get crowded, so combine them with walking and the subway.
- Many temples close around 4:30–5 pm, so do temples early and food and strolling later.
- Carry some cash: smaller restaurants and temples don't always take cards.
- Bring comfortable shoes. You'll easily walk 15,000+ steps a day on this plan.
'''),
],
[
("user", r'''
My 15-year-old asked what compound interest is. Help me explain it in a way that'll stick.
'''),
("assistant", r'''
Here's an explanation built around something teenagers care about: money growing without any extra work.

**The one-sentence version**
Compound interest means you earn interest **on your interest**, not just on the money you put in.

**A story with numbers**
Say you put $1,000 in an account that pays 10% a year (a generous rate, but it keeps the maths easy).

| year | start of year | interest earned | end of year |
|---|---|---|---|
| 1 | $1,000 | $100 | $1,100 |
| 2 | $1,100 | $110 | $1,210 |
| 3 | $1,210 | $121 | $1,331 |
| 10 | ... | ... | about $2,594 |

Notice that the interest grows each year, even though you didn't add anything. In year 1 you earn $100; by year 10 you're earning over $230 a year, all from the same original $1,000.

Compare with *simple* interest, where you only earn on the original $1,000: after 10 years you'd have $2,000. Compounding gave you almost $600 extra for doing nothing.

**The part that sticks: time beats amount**
Two friends each invest at 7% a year until age 65:
- **Alex** invests $2,000 a year from age 15 to 25 (11 years, $22,000 total), then stops.
- **Sam** starts at 25 and invests $2,000 a year until 65 (41 years, $82,000 total).

Alex ends up with more, roughly $470,000 versus Sam's roughly $430,000, despite putting in far less, because Alex's money had ten extra years to compound.

**The flip side**
Compounding works against you with debt. A credit card charging about 24% a year compounds too, which is why a small unpaid balance can grow surprisingly fast.

A fun way to test it: ask them to guess how much a penny doubled every day for 30 days would be. The answer (over $5 million on day 30) is a good way to make exponential growth feel real.
'''),
],
[
("user", r'''
When do I use "fewer" and when "less"? I always mix them up.
'''),
("assistant", r'''
The basic rule:

- **Fewer** for things you can **count** (plural nouns): *fewer cars, fewer mistakes, fewer people.*
- **Less** for things you **measure** but don't count (uncountable nouns): *less traffic, less water, less time.*

A quick test: if you can put a number in front of it ("three cars"), use *fewer*. If you can't ("three traffics"), use *less*.

| fewer | less |
|---|---|
| fewer calories | less sugar |
| fewer emails | less mail |
| fewer dollars | less money |
| fewer hours of sleep | less sleep |

**Exceptions that are correct even though they sound like they break the rule.** With time, money, distance and weight we usually think of an amount, not separate units, so *less* is standard:
- *Less than 10 minutes* (an amount of time)
- *Less than $50*
- *Less than 5 miles*
- *25 words or less* (common on forms and widely accepted)

The supermarket sign "10 items or less" is a famous example that sticklers complain about; "10 items or fewer" is the traditional form, but "or less" is so common in this fixed phrase that most usage guides now accept it in informal contexts.
'''),
],
[
("user", r'''
affect vs effect, once and for all please
'''),
("assistant", r'''
**Most of the time:**

- **Affect** is a **verb**: to influence something. *The rain will affect the match.*
- **Effect** is a **noun**: the result. *The rain had a big effect on the match.*

Memory trick: **A**ffect is the **A**ction, **E**ffect is the **E**nd result. Or: "the **a**rrow **a**ffects the target; the **e**ffect is the hole".

You can check with substitution: if "influence" (verb) fits, use *affect*; if "result" fits, use *effect*.

**Less common uses** (these are why people get confused):
- **Effect** as a verb means *to bring about*: *The new manager effected major changes* (she made them happen). Compare *affected major changes* (she influenced changes that were already happening).
- **Affect** as a noun is a psychology term for visible emotion: *The patient had a flat affect.*

If you're not writing about psychology or "bringing about" changes, the first rule covers essentially every case.
'''),
],
[
("user", r'''
I want to reach conversational Spanish in 6 months. I can study about 45 minutes a day. What should the plan look like?
'''),
("assistant", r'''
Six months at 45 minutes a day is about 135 hours. That's enough to hold simple, real conversations if most of the time goes into listening and speaking rather than only apps. Here's a phased plan.

**Months 1–2: foundations**
- **Daily:** 20 min structured course (a textbook or a well-organised course), 15 min vocabulary with spaced repetition (Anki or similar, about 10 new words a day), 10 min listening to beginner podcasts or slow Spanish.
- **Focus:** present tense, the 500 most common words, pronunciation, and survival phrases: introducing yourself, asking questions, ordering, numbers.
- **Start speaking in week 2**, even badly: read dialogues aloud, shadow audio (repeat right after the speaker).

**Months 3–4: start talking**
- **2–3 times a week:** a 30-minute conversation session with a tutor or language exchange partner (italki, Tandem, or a local meetup). This replaces one day's course work.
- **Other days:** course (15 min), vocabulary (10 min), listening to graded podcasts or YouTube with Spanish subtitles (20 min).
- **Focus:** past tenses (preterite vs imperfect), talking about your day, your work, your plans.
- **Keep a "things I couldn't say" list** during conversations and look them up afterwards. That's your most useful vocabulary.

**Months 5–6: build fluency**
- **3 conversation sessions a week**, longer topics: opinions, stories, travel, news.
- **Immersion:** switch one show you'd watch anyway to Spanish with Spanish subtitles; start a simple novel or graded reader.
- **Write** a short journal entry (5 sentences) twice a week and have a tutor or partner correct it.

**Principles that make the difference**
- **Consistency beats intensity.** 45 minutes daily is far better than 5 hours on Sunday.
- **Speaking early** is uncomfortable and is exactly what makes the plan work.
- **Pick one variety** (Spain or Latin American Spanish) for listening at first, mainly to keep pronunciation consistent; they're mutually intelligible, so it's not a big decision.

Milestone check: by month 6 you should be able to chat for 15–20 minutes about everyday topics, with mistakes but without freezing. That's conversational.
'''),
],
[
("user", r'''
I've never lifted weights. Give me a simple 3-day-a-week beginner routine I can do at a gym.
'''),
("assistant", r'''
Here's a simple full-body routine, done three days a week with a rest day in between (e.g. Monday, Wednesday, Friday). Each session takes about 45–60 minutes.

**Warm-up (every session, 5–10 min):** brisk walking or cycling, then a few light sets of the first exercise.

**Workout A and Workout B, alternating**

| Workout A | sets × reps | Workout B | sets × reps |
|---|---|---|---|
| Goblet squat | 3 × 8–10 | Romanian deadlift (dumbbells) | 3 × 8–10 |
| Dumbbell bench press | 3 × 8–10 | Seated dumbbell shoulder press | 3 × 8–10 |
| Seated cable row | 3 × 10–12 | Lat pulldown | 3 × 10–12 |
| Walking lunges | 2 × 10 per leg | Leg press | 3 × 10–12 |
| Plank | 3 × 20–40 s | Dead bug | 3 × 8 per side |

Week 1: A, B, A. Week 2: B, A, B. And so on.

**How to progress**
- Start with a weight you could lift for about **2–3 more reps** than the target. The last reps should feel challenging but your form should stay clean.
- When you can do the top of the rep range for all sets, increase the weight a little next time (e.g. 1–2 kg for dumbbells).
- Rest 1.5–2 minutes between sets.

**Form first**
- Learn each exercise with light weights; ask a gym staff member for a quick check, or film yourself.
- Keep a neutral back on squats and deadlifts; don't round your lower back.
- Controlled movements, no jerking.

**Other basics:** soreness for a day or two in the first weeks is normal; sharp pain is not, so stop that exercise. Sleep and enough protein make a big difference to progress. If you have any injuries or health conditions, check with a doctor or physiotherapist before starting.
'''),
],
[
("user", r'''
I can't fall asleep before 1am even though I'm tired. Any tips that actually work?
'''),
("assistant", r'''
That's common, and the good news is the most effective fixes are behavioural. These are the ones with the best evidence behind them:

**1. Fix your wake-up time first, not your bedtime.**
Get up at the same time every day, weekends included, even after a bad night. A consistent wake time is what anchors your body clock; the earlier sleepiness at night follows within a week or two.

**2. Get bright light in the morning.**
Go outside within an hour of waking, for 10–20 minutes, even when it's cloudy. Morning light shifts your internal clock earlier. In the evening, do the opposite: dim the lights in the last hour or two.

**3. Only go to bed when you're sleepy.**
If you're lying awake for what feels like more than 20 minutes, get up, do something calm in dim light (reading a paper book, not your phone), and go back when you feel drowsy. This stops your brain from associating the bed with frustration.

**4. Watch caffeine and alcohol.**
Caffeine's effects last many hours, so a coffee at 3 pm can still be active at bedtime. Try no caffeine after noon. Alcohol makes you drowsy but fragments sleep later in the night.

**5. Build a wind-down routine.**
The last 30–60 minutes before bed: the same calm sequence each night, like a shower, reading or stretching. Write down tomorrow's to-do list to get it out of your head.

**6. Keep the bedroom cool, dark and quiet.**

**Give it 2–3 weeks.** Body clocks shift gradually, about 15–30 minutes earlier every few days if you're consistent.

If it doesn't improve, or you snore loudly, wake up gasping, or feel exhausted despite enough hours, talk to a doctor. For long-standing insomnia, a structured program called CBT-I (cognitive behavioural therapy for insomnia) is the recommended first treatment and works better long-term than sleeping pills.
'''),
],
[
("user", r'''
Explain blockchain in plain English. No hype, just what it is.
'''),
("assistant", r'''
A **blockchain** is a way for many computers to keep **the same shared record** (a ledger) **without trusting a single central keeper**, and in a way that makes past entries very hard to change.

**How it works, simply**

1. **Records are grouped into blocks.** Each block holds a batch of entries, for example "Alice sent 2 coins to Bob".
2. **Blocks are chained.** Each block contains a fingerprint (a cryptographic hash) of the previous block. Change anything in an old block, and its fingerprint changes, which breaks the link to every block after it. Tampering is obvious.
3. **Many copies.** Thousands of computers keep a full copy of the chain. There's no master copy to hack or quietly edit.
4. **Agreement rules.** The network needs a way to agree on which new block comes next. Bitcoin uses "proof of work" (computers compete to solve a costly puzzle); others use "proof of stake" (participants lock up coins as a deposit they lose if they cheat).

**What it's good for**
A shared record among parties who **don't trust each other** and **don't want a central authority**. Cryptocurrencies are the main working example.

**Trade-offs and limits**
- **Slow and expensive** compared with a normal database. A bank's database handles far more transactions per second.
- **Hard to correct mistakes.** If you send money to the wrong address, there's usually no one to reverse it.
- **Garbage in, garbage out.** The chain can prove a record wasn't changed, not that it was true when entered.
- **Often unnecessary.** If there's an organisation everyone already trusts to keep the records, a regular database is simpler, cheaper and faster.

A useful question for any blockchain project: *"Why wouldn't a shared database run by a trusted party work here?"* If there's no good answer, it probably doesn't need a blockchain.
'''),
],
[
("user", r'''
My book club is reading Pride and Prejudice. Can you suggest some discussion questions that go beyond "did you like it"?
'''),
("assistant", r'''
Here are questions grouped by theme. Pick a handful; most of them can fill 15 minutes each.

**First impressions and prejudice**
1. The novel's working title was *First Impressions*. Whose first impressions turn out to be most wrong: Elizabeth's, Darcy's, or someone else's?
2. Elizabeth prides herself on judging character. Why is she so easily taken in by Wickham? What does that say about her?
3. Is Darcy's first proposal more insulting or more honest than a "proper" proposal would have been?

**Marriage and money**
4. Charlotte Lucas marries Mr Collins for security. Is Austen criticising her, defending her, or neither? How would you judge her choice given her options?
5. Compare the marriages we see: the Bennets, the Collinses, Lydia and Wickham, and (eventually) Jane and Bingley. What is Austen saying about what makes a good marriage?
6. The entailment means the Bennet estate passes to Mr Collins, not to the daughters. How does that single legal fact drive the plot?

**Characters**
7. Mr Bennet is funny, but is he a good father? What does his detachment cost his family?
8. Mrs Bennet is often read as ridiculous. Is her obsession with marrying off her daughters actually rational?
9. Lady Catherine tries to prevent the match and ends up helping it. What role does she play in bringing Elizabeth and Darcy together?

**Change and growth**
10. Both Elizabeth and Darcy change over the novel. Who changes more, and what triggers each change? (Think about Darcy's letter and the visit to Pemberley.)
11. "Till this moment I never knew myself." Why is this line such a turning point for Elizabeth?

**Then and now**
12. The book was published in 1813. Which parts feel dated, and which feel surprisingly modern?
13. If the story were set today, what would replace the entailment, the balls, and the letters?

A good closing question: *Is the ending earned?* Do you believe Elizabeth and Darcy will be happy, and why?
'''),
],
[
("user", r'''
Write the opening of a sci-fi short story. A lighthouse keeper on a planet with no oceans. Around 250 words.
'''),
("assistant", r'''
The lighthouse had been built for a sea that never came.

Every evening, Ines climbed the two hundred and twelve steps and lit the lamp anyway. Below her, the plain of red dust stretched flat to every horizon, as still as a held breath. Wind moved across it in long, slow waves, and if you squinted at dusk, with the lamp turning and the dust rising, you could almost believe in water.

The terraforming company had been very sure about the water. The ice comets were scheduled, the orbital mirrors were in place, and the brochures had shown white beaches and sailing boats. The lighthouse was built first, as a promise. Then the company went bankrupt, the comets were sold to another system, and the colonists who stayed learned to farm in sealed domes and to stop looking at the sky.

Ines had not stopped. Her grandmother had been the first keeper, and her mother the second, and each had written the same line in the logbook at the end of every shift: *No ships sighted. Light maintained.*

Tonight, for the first time in ninety-one years, she wrote something else.

She sat with the pen above the page for a long time, listening to the mechanism turn, watching the small bright point low on the eastern horizon that was not a star, because it was moving, and because it was answering.

Three flashes. A pause. Three flashes.

It was the old signal, the one from the manuals. It meant: *Where is the harbour?*
'''),
],
[
("user", r'''
What's the Feynman technique and how do I use it to study?
'''),
("assistant", r'''
The **Feynman technique** is a way to learn something deeply by trying to **explain it simply**. It's named after the physicist Richard Feynman, famous for explaining complex ideas in plain language. The core idea: if you can't explain it simply, you don't fully understand it yet.

**The four steps**

1. **Pick a concept** and write its name at the top of a blank page, e.g. "how a bill becomes law" or "supply and demand".
2. **Explain it as if teaching a 12-year-old.** Write it out in plain words, with examples. No jargon, or if you use a technical term, define it.
3. **Find the gaps.** Wherever you got stuck, got vague, or reached for jargon to cover the hole, that's what you don't understand yet. Go back to your notes or textbook for those parts specifically.
4. **Simplify and use analogies.** Rewrite the explanation more clearly. Add an analogy ("voltage is like water pressure in a pipe"). Read it aloud; if it sounds confusing, keep refining.

**Example: "opportunity cost"**
First attempt: *"It's the cost of your opportunities."* That's circular, a gap. After checking: *"When you choose one thing, you give up the next-best thing you could have done. That lost option is the opportunity cost. If you spend Saturday working a shift for $100 instead of going to a concert, the concert is your opportunity cost."*

**Why it works**
- It forces **active recall**, which strengthens memory far more than rereading.
- It exposes the illusion of understanding: the feeling of "I get it" when reading, which often disappears when you try to explain.

**Tips**
- Do it out loud to a friend, a rubber duck, or your phone's voice recorder.
- Use it on the topics you *think* you know. That's where the surprises are.
'''),
],
[
("user", r'''
My pothos has yellow leaves. What am I doing wrong?
'''),
("assistant", r'''
Yellow leaves on a pothos are most often caused by **overwatering**, but a few other things can do it too. Here's how to tell which.

**1. Overwatering (most common)**
- *Signs:* several leaves turning yellow at once, sometimes with brown spots; soil that stays wet for days; a musty smell; mushy stems near the soil.
- *Fix:* let the top 2–3 cm (about an inch) of soil dry out before watering again. Make sure the pot has drainage holes and never leaves the plant standing in water. If the roots are brown and mushy, trim the rotten ones and repot in fresh, well-draining soil.

**2. Underwatering**
- *Signs:* yellow leaves that are also dry or crispy, drooping, soil pulling away from the pot edges.
- *Fix:* water thoroughly until it drains out the bottom, then keep a more regular schedule.

**3. Light problems**
- *Too little light:* pale yellowing, leggy stems with big gaps between leaves.
- *Too much direct sun:* yellow or bleached patches, scorched brown edges.
- *Fix:* bright, indirect light is ideal, e.g. near a window but out of harsh afternoon sun.

**4. Natural ageing**
- *Signs:* just one or two of the **oldest** leaves (closest to the soil) turning yellow occasionally, while new growth looks healthy.
- *Fix:* nothing. Pinch them off; it's normal.

**5. Nutrients or temperature**
- If it hasn't been fed in a long time, a diluted houseplant fertiliser once a month in spring and summer helps.
- Cold drafts or sitting next to a radiator can also stress it.

A quick test: push your finger into the soil. If it's wet a few days after watering, it's almost certainly overwatering. Yellow leaves won't turn green again, so remove them once you've fixed the cause.
'''),
],
[
("user", r'''
How does tipping differ between the US and Japan? Going to both this year.
'''),
("assistant", r'''
They're close to opposites.

**United States: tipping is expected**
Wages for many service jobs assume tips, so tipping isn't really optional.

| service | typical tip |
|---|---|
| Sit-down restaurant | 18–20% of the pre-tax bill (15% for mediocre service) |
| Bar | $1–2 per drink, or about 20% of a tab |
| Taxi / rideshare | 15–20% |
| Hotel housekeeping | a few dollars per night, left daily |
| Hotel porter | $1–2 per bag |
| Hairdresser | 15–20% |

- Check the bill for an included "service charge" or "gratuity", common for large groups; if it's there, you don't need to add more.
- Counter-service places and payment screens often prompt for a tip; that's more discretionary.

**Japan: don't tip**
Good service is considered part of the job, and leaving extra money can cause confusion. Staff may even chase you down the street to return it.

- Just pay the amount on the bill, usually at the register rather than at the table.
- Some high-end restaurants and hotels add a **service charge** (often 10–15%) automatically; that's all you need.
- If you want to thank someone for exceptional personal service, say a guide or a ryokan host, a small gift from home, or money placed in an envelope and handed over with both hands, is more appropriate than cash passed directly.

**Handy phrase in Japan:** *gochisōsama deshita* ("thank you for the meal") when leaving a restaurant is appreciated far more than a tip.
'''),
],
[
("user", r'''
I'm terrified of public speaking and have to give a 10-minute presentation at work next month. Help.
'''),
("assistant", r'''
A month is plenty of time, and nerves are very beatable with preparation. Here's a plan.

**Weeks 1–2: make the content easy to deliver**
- **Start with one sentence:** what should the audience remember if they forget everything else? Build everything around that.
- **Structure in three parts:** the problem or context, your main points (no more than three), what you want them to do or decide.
- **Fewer words on slides.** Slides with a few words or one chart; the details live in your speaking notes. Slides full of text tempt you to read, which makes you more nervous.
- **Write a strong first 30 seconds and memorise it.** Nerves peak at the start; a memorised opening gets you through the worst moment on autopilot.

**Weeks 2–4: rehearse the way you'll perform**
- **Practise out loud, standing up, with a timer.** Not in your head. At least 5–6 full run-throughs.
- **Record yourself once.** Painful, but you'll notice fixable habits (speaking too fast, "um" at every slide change) and also that you look calmer than you feel.
- **Do one run in front of a friend or a friendly colleague.** Ask for one thing you did well and one to improve.
- **Prepare for two or three likely questions.**

**On the day**
- **Reframe the adrenaline:** a racing heart feels the same as excitement. Telling yourself "I'm excited" works better than "calm down", which is what research on this suggests.
- **Slow breathing before you start:** breathe in for 4 counts, out for 6, a few times. Longer exhales calm your nervous system.
- **Find friendly faces** and talk to them, one at a time.
- **Pause** instead of saying "um". A two-second pause feels long to you and completely normal to the audience.

**Remember:** the audience wants you to succeed. They're rarely judging as harshly as you fear, and they mostly don't notice the nerves you feel inside. If you'd like, paste your outline here and I'll help you tighten it.
'''),
],
]
